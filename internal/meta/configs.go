package meta

import (
	"fmt"
	"math"
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

// MinSegmentBytes is Kafka 4's minimum segment.bytes (and
// log.segment.bytes): smaller segments only multiply files, one per produce
// at the extreme.
const MinSegmentBytes = 1 << 20

// TopicConfigs lists the topic configs accepted by CreateTopics and the
// AlterConfigs APIs, with Kafka's types and allowed ranges (Kafka 4's
// LogConfig). Anything else is INVALID_CONFIG.
var TopicConfigs = []ConfigDef{
	{Name: "cleanup.policy", BrokerName: "log.cleanup.policy", Type: TypeList,
		Doc: "Only \"delete\" is supported (compaction is not built yet).", validate: validateCleanupPolicy},
	{Name: "max.message.bytes", BrokerName: "message.max.bytes", Type: TypeInt,
		Doc: "Largest record batch accepted, in bytes.", validate: intIn(0, math.MaxInt32, 32)},
	{Name: "message.timestamp.type", BrokerName: "log.message.timestamp.type", Type: TypeString,
		Doc: "CreateTime or LogAppendTime.", validate: validateTimestampType},
	{Name: "min.insync.replicas", BrokerName: "min.insync.replicas", Type: TypeInt,
		Doc: "Accepted for compatibility; a single node always has one in-sync replica.", validate: intIn(1, math.MaxInt32, 32)},
	// Kafka gives retention.bytes no lower bound: any negative value is
	// unlimited.
	{Name: "retention.bytes", BrokerName: "log.retention.bytes", Type: TypeLong,
		Doc: "Bytes kept per partition before old segments are deleted; negative: unlimited; 0: only the active segment.", validate: intIn(math.MinInt64, math.MaxInt64, 64)},
	{Name: "retention.ms", BrokerName: "log.retention.ms", Type: TypeLong,
		Doc: "Age after which old segments are deleted; -1: unlimited; 0: as soon as they are rolled.", validate: intIn(-1, math.MaxInt64, 64)},
	{Name: "segment.bytes", BrokerName: "log.segment.bytes", Type: TypeInt,
		Doc: "Size at which a segment is rolled.", validate: intIn(MinSegmentBytes, math.MaxInt32, 32)},
	{Name: "segment.ms", BrokerName: "log.roll.ms", Type: TypeLong,
		Doc: "Age at which a segment is rolled.", validate: intIn(1, math.MaxInt64, 64)},
}

// Check validates a value of this config; the error states the allowed
// values, for a message that also names the config.
func (d ConfigDef) Check(value string) error { return d.validate(value) }

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

// intIn accepts a bits-bit integer in [minimum, maximum]; the error states
// the range, as Kafka's Range validator does.
func intIn(minimum, maximum int64, bits int) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
		if err != nil || n < minimum || n > maximum {
			switch {
			case minimum == math.MinInt64 && maximum == math.MaxInt64:
				return fmt.Errorf("must be a %d-bit integer", bits)
			case maximum == math.MaxInt64 || maximum == math.MaxInt32:
				return fmt.Errorf("must be a %d-bit integer of at least %d", bits, minimum)
			}
			return fmt.Errorf("must be an integer in [%d, %d]", minimum, maximum)
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
