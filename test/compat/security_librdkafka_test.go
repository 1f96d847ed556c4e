package compat_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// librdkafka in the security story (security_test.go), through kcat and
// Debian's python3-confluent-kafka, with librdkafka's own properties:
// security.protocol, sasl.mechanisms, sasl.username, sasl.password,
// ssl.ca.location. kcat uses PLAIN over SASL_PLAINTEXT,
// confluent-kafka-python over SASL_SSL; both SCRAM-SHA-512 over SASL_SSL.

// librdkafkaProps are the properties of alice on the listener of protocol
// ("SASL_SSL" or "SASL_PLAINTEXT") with mechanism and password.
func (s *secureBroker) librdkafkaProps(protocol, mechanism, password string) (bootstrap string, props map[string]string) {
	props = map[string]string{
		"security.protocol": protocol,
		"sasl.mechanisms":   mechanism,
		"sasl.username":     tenantUser,
		"sasl.password":     password,
	}
	bootstrap = s.saslPlaintext
	if protocol == "SASL_SSL" {
		bootstrap = s.saslSSL
		props["ssl.ca.location"] = s.caFile
	}
	return bootstrap, props
}

// kcatArgs are -b and the -X options of props.
func kcatArgs(bootstrap string, props map[string]string) []string {
	args := []string{"-b", bootstrap}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-X", k+"="+props[k])
	}
	return args
}

func TestSecurityKcat(t *testing.T) {
	kcat := lookTool(t, "kcat", "apt-get install -y kcat")
	debVersions(t, "kcat", "librdkafka1")
	s := startSecureBroker(t)
	const client = "kcat"
	scram := func(password string) []string {
		return kcatArgs(s.librdkafkaProps("SASL_SSL", "SCRAM-SHA-512", password))
	}
	plain := kcatArgs(s.librdkafkaProps("SASL_PLAINTEXT", "PLAIN", tenantPass))
	produce := func(conn []string, mech string) {
		prefix, _ := storyRecords(client, mech)
		s.run(time.Minute, "", nil, kcatLines(prefix, secureRecords), kcat, append(conn, "-P", "-t", tenantTopic, "-K", ":",
			"-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=20")...)
	}
	consume := func(conn []string, args ...string) []record {
		base := append(conn, "-G", tenantGroup, "-X", "auto.offset.reset=earliest", "-q", "-f", `%t %p %o %k:%s\n`)
		return parseKcat(t, s.run(time.Minute, "", nil, "", kcat, append(append(base, args...), tenantTopic)...))
	}

	// 1. and 2.: SCRAM-SHA-512 over SASL_SSL, then PLAIN over
	// SASL_PLAINTEXT (-e: until every assigned partition is at its end).
	produce(scram(tenantPass), "scram")
	first := consume(scram(tenantPass), "-c", fmt.Sprint(secureFirst))
	produce(plain, "plain")
	second := consume(plain, "-e")
	s.checkStory(client, first, second)

	// 3. A wrong password: kcat -L gives up on the metadata.
	r := runCmd(time.Minute, "", nil, "", kcat, append(scram(wrongPassword), "-L", "-m", "3")...)
	if r.err == nil {
		t.Fatalf("kcat -L with a wrong password succeeded:\n%s", r.stdout)
	}
	wantError(t, client, "wrong password", lastLines(r.stderr, 3), "SASL authentication error")

	// 4. Bob's topic and group, and what alice sees.
	r = runCmd(time.Minute, "", nil, "k:v\n", kcat, append(scram(tenantPass), "-P", "-t", otherTopic, "-K", ":")...)
	if r.err == nil {
		t.Fatalf("kcat -P to %s succeeded:\n%s", otherTopic, r.stderr)
	}
	wantError(t, client, "produce to another tenant's topic", lastLines(r.stderr, 3), "Topic authorization failed")
	// kcat's balanced consumer reports the group's error and goes on
	// trying: it runs until the timeout, and what it printed is checked.
	r = runCmd(8*time.Second, "", nil, "", kcat, append(scram(tenantPass), "-G", otherGroup, "-X", "auto.offset.reset=earliest", "-q", "-e", tenantTopic)...)
	if r.stdout != "" {
		t.Fatalf("kcat -G %s consumed:\n%s", otherGroup, r.stdout)
	}
	wantError(t, client, "consume in another tenant's group", firstLineWith(r.stderr, "authorization"), "Group authorization failed")
	var md struct {
		Topics []struct{ Topic string }
	}
	if err := json.Unmarshal([]byte(s.run(time.Minute, "", nil, "", kcat, append(scram(tenantPass), "-L", "-J")...)), &md); err != nil {
		t.Fatalf("kcat -L -J: %v", err)
	}
	var topics []string
	for _, tp := range md.Topics {
		topics = append(topics, tp.Topic)
	}
	checkTenantTopics(t, client, topics)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// firstLineWith is the first line of s that contains word
// (case-insensitive), or all of s when none does.
func firstLineWith(s, word string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(strings.ToLower(l), strings.ToLower(word)) {
			return l
		}
	}
	return s
}

func TestSecurityConfluentKafkaPython(t *testing.T) {
	py := pythonModule(t, "confluent_kafka", "python3-confluent-kafka")
	debVersions(t, "python3-confluent-kafka", "librdkafka1")
	s := startSecureBroker(t)
	const client = "confluent-kafka-python"
	script, err := filepath.Abs("python/confluent_client.py")
	if err != nil {
		t.Fatal(err)
	}
	c := storyScript{s: s, client: client, as: func(protocol, mechanism, password string, args ...string) result {
		bootstrap, props := s.librdkafkaProps(protocol, mechanism, password)
		return s.pythonSecurity(py, script, props, bootstrap, args...)
	}}

	// 1. and 2.: SCRAM-SHA-512, then PLAIN, both over SASL_SSL.
	c.story("SASL_SSL", []string{"zstd", "1"}, []string{"lz4", "1"})

	type kafkaError struct{ Name, Str string }
	// 3. A wrong password.
	var auth struct{ Error kafkaError }
	c.wrongPassword(&auth, "auth_error")
	if auth.Error.Name != "_AUTHENTICATION" {
		t.Fatalf("wrong password: error_cb got %+v, want KafkaError._AUTHENTICATION", auth.Error)
	}
	wantError(t, client, "wrong password", auth.Error.Name+": "+auth.Error.Str, "SASL authentication error")

	// 4. Bob's topic and group, and what alice sees.
	var denied struct {
		Produce, Group kafkaError
		Topics         []string
	}
	c.denied(&denied)
	if denied.Produce.Name != "TOPIC_AUTHORIZATION_FAILED" || denied.Group.Name != "GROUP_AUTHORIZATION_FAILED" {
		t.Fatalf("denied: %+v, want TOPIC_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED", denied)
	}
	wantError(t, client, "produce to another tenant's topic", denied.Produce.Name+": "+denied.Produce.Str, "Topic authorization failed")
	wantError(t, client, "consume in another tenant's group", denied.Group.Name+": "+denied.Group.Str, "Group authorization failed")
	checkTenantTopics(t, client, denied.Topics)
}
