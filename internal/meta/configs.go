package meta

import (
	"fmt"
	"strconv"
	"strings"
)

// ConfigType is the Kafka config type code reported by DescribeConfigs v3+.
type ConfigType int8

// Kafka's config type codes (DescribeConfigsResponse ConfigType).
const (
	TypeBoolean ConfigType = 1
	TypeString  ConfigType = 2
	TypeInt     ConfigType = 3
	TypeLong    ConfigType = 5
	TypeList    ConfigType = 7
)

// ConfigDef describes one topic config Sushka understands, under Kafka's
// name, with the broker config that supplies its default (Kafka's synonym).
type ConfigDef struct {
	Name       string     // topic config name, e.g. retention.ms
	BrokerName string     // the broker default's name, e.g. log.retention.ms
	Type       ConfigType // reported type
	Doc        string
	validate   func(string) error
}

// TopicConfigs lists the topic configs accepted by CreateTopics and the
// AlterConfigs APIs. Anything else is INVALID_CONFIG.
var TopicConfigs = []ConfigDef{
	{Name: "cleanup.policy", BrokerName: "log.cleanup.policy", Type: TypeList,
		Doc: "Only \"delete\" is supported (compaction is not built yet).", validate: validateCleanupPolicy},
	{Name: "max.message.bytes", BrokerName: "message.max.bytes", Type: TypeInt,
		Doc: "Largest record batch accepted, in bytes.", validate: intAtLeast(0, 32)},
	{Name: "message.timestamp.type", BrokerName: "log.message.timestamp.type", Type: TypeString,
		Doc: "CreateTime or LogAppendTime.", validate: validateTimestampType},
	{Name: "min.insync.replicas", BrokerName: "min.insync.replicas", Type: TypeInt,
		Doc: "Accepted for compatibility; a single node always has one in-sync replica.", validate: intAtLeast(1, 32)},
	{Name: "retention.bytes", BrokerName: "log.retention.bytes", Type: TypeLong,
		Doc: "Bytes kept per partition before old segments are deleted; -1 unlimited.", validate: intAtLeast(-1, 64)},
	{Name: "retention.ms", BrokerName: "log.retention.ms", Type: TypeLong,
		Doc: "Age after which old segments are deleted; -1 unlimited.", validate: intAtLeast(-1, 64)},
	{Name: "segment.bytes", BrokerName: "log.segment.bytes", Type: TypeInt,
		Doc: "Size at which a segment is rolled.", validate: intAtLeast(14, 32)},
	{Name: "segment.ms", BrokerName: "log.roll.ms", Type: TypeLong,
		Doc: "Age at which a segment is rolled.", validate: intAtLeast(1, 64)},
}

// LookupConfig returns the definition of a topic config.
func LookupConfig(name string) (ConfigDef, bool) {
	for _, d := range TopicConfigs {
		if d.Name == name {
			return d, true
		}
	}
	return ConfigDef{}, false
}

// ValidateConfig checks one topic config value; the error text is meant for
// the client (INVALID_CONFIG).
func ValidateConfig(name string, value *string) error {
	d, ok := LookupConfig(name)
	if !ok {
		return fmt.Errorf("unknown or unsupported topic config %q", name)
	}
	if value == nil {
		return fmt.Errorf("null value for topic config %q", name)
	}
	if err := d.validate(*value); err != nil {
		return fmt.Errorf("invalid value %q for %s: %v", *value, name, err)
	}
	return nil
}

// ValidateConfigs checks a set of topic configs.
func ValidateConfigs(configs map[string]string) error {
	for k, v := range configs {
		if err := ValidateConfig(k, &v); err != nil {
			return err
		}
	}
	return nil
}

func intAtLeast(minimum int64, bits int) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
		if err != nil {
			return fmt.Errorf("not a %d-bit integer", bits)
		}
		if n < minimum {
			return fmt.Errorf("must be at least %d", minimum)
		}
		return nil
	}
}

func validateCleanupPolicy(s string) error {
	for _, p := range strings.Split(s, ",") {
		switch strings.TrimSpace(p) {
		case "delete":
		case "compact":
			return fmt.Errorf("compaction is not supported yet")
		default:
			return fmt.Errorf("must be delete")
		}
	}
	return nil
}

func validateTimestampType(s string) error {
	if s != "CreateTime" && s != "LogAppendTime" {
		return fmt.Errorf("must be CreateTime or LogAppendTime")
	}
	return nil
}
