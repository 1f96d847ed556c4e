package compat_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// kafka-python (Debian's python3-kafka 2.0.2) in the security story
// (security_test.go): security_protocol, sasl_mechanism,
// sasl_plain_username, sasl_plain_password, ssl_cafile. 2.0.2 has SCRAM
// (kafka/scram.py) and authenticates with SaslHandshake v0 and the SASL
// tokens in raw length-prefixed frames (no SaslAuthenticate): SCRAM-SHA-512
// over SASL_SSL and PLAIN over SASL_PLAINTEXT.

func TestSecurityKafkaPython(t *testing.T) {
	py := pythonModule(t, "kafka", "python3-kafka")
	debVersions(t, "python3-kafka")
	s := startSecureBroker(t)
	const client = "kafka-python"
	script, err := filepath.Abs("python/kafka_python_client.py")
	if err != nil {
		t.Fatal(err)
	}
	c := storyScript{s: s, client: client, as: func(protocol, mechanism, password string, args ...string) result {
		settings := map[string]string{
			"security_protocol":   protocol,
			"sasl_mechanism":      mechanism,
			"sasl_plain_username": tenantUser,
			"sasl_plain_password": password,
		}
		bootstrap := s.saslPlaintext
		if protocol == "SASL_SSL" {
			bootstrap = s.saslSSL
			settings["ssl_cafile"] = s.caFile
		}
		return s.pythonSecurity(py, script, settings, bootstrap, args...)
	}}

	// 1. and 2.: SCRAM-SHA-512 over SASL_SSL, then PLAIN over SASL_PLAINTEXT.
	c.story("SASL_PLAINTEXT", []string{"gzip"}, []string{"none"})

	type pyError struct{ Class, Str string }
	// 3. A wrong password: over SaslHandshake v0 the broker can only close
	// the connection (Kafka does the same: there is no response to carry
	// an error), so kafka-python reports the connection it lost.
	var auth struct {
		Raised pyError
		Log    []string
	}
	c.wrongPassword(&auth, "auth_error")
	if auth.Raised.Class != "NoBrokersAvailable" {
		t.Fatalf("wrong password: KafkaAdminClient raised %+v, want NoBrokersAvailable (log: %q)", auth.Raised, auth.Log)
	}
	wantError(t, client, "wrong password", auth.Raised.Class+": "+auth.Raised.Str+"; logged: "+strings.Join(auth.Log, " | "), "NoBrokersAvailable")

	// 4. Bob's topic and group, and what alice sees. kafka-python 2.0.2's
	// producer never raises TopicAuthorizationFailedError for a topic
	// alone in its metadata request: cluster.update_metadata fails such an
	// answer before it records the topic as unauthorized, and send asks
	// again until max_block_ms (KafkaTimeoutError); describe_topics shows
	// the broker's TOPIC_AUTHORIZATION_FAILED (error_code 29).
	var denied struct {
		Produce, Describe, Group pyError
		Topics                   []string
	}
	c.denied(&denied)
	if denied.Produce.Class != "KafkaTimeoutError" || denied.Describe.Class != "TopicAuthorizationFailedError" || denied.Group.Class != "GroupAuthorizationFailedError" {
		t.Fatalf("denied: %+v, want KafkaTimeoutError from send, TopicAuthorizationFailedError from describe_topics, GroupAuthorizationFailedError", denied)
	}
	wantError(t, client, "produce to another tenant's topic (send)", denied.Produce.Class+": "+denied.Produce.Str, "Failed to update metadata")
	wantError(t, client, "another tenant's topic (describe_topics)", denied.Describe.Class+": "+denied.Describe.Str, "error_code 29")
	wantError(t, client, "consume in another tenant's group", denied.Group.Class+": "+denied.Group.Str, "GroupAuthorizationFailedError")
	checkTenantTopics(t, client, denied.Topics)
}
