package compat_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// kafkajs in the security story (security_test.go): ssl {ca}, sasl
// {mechanism: 'scram-sha-512' | 'plain', username, password}, both over
// SASL_SSL; the idempotent producer, a group consumer with manual commits.

func TestSecurityKafkaJS(t *testing.T) {
	dir := kafkajsDir(t)
	s := startSecureBroker(t)
	const client = "kafkajs"
	type settings struct {
		SSL  map[string][]string `json:"ssl"`
		SASL map[string]string   `json:"sasl"`
	}
	as := func(mechanism, password string, args ...string) result {
		config, err := json.Marshal(settings{
			SSL:  map[string][]string{"ca": {s.caPEM()}},
			SASL: map[string]string{"mechanism": mechanism, "username": tenantUser, "password": password},
		})
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"KAFKAJS_NO_PARTITIONER_WARNING=1", "SUSHKA_COMPAT_CONFIG=" + string(config)}
		return runCmd(2*time.Minute, dir, env, "", "node", append([]string{"client.js", s.saslSSL}, args...)...)
	}
	run := func(mechanism string, args ...string) string {
		r := as(mechanism, tenantPass, args...)
		if r.err != nil {
			t.Fatalf("%s %v: %v\n%s%s\nbroker log:\n%s", mechanism, args, r.err, r.stdout, tail(r.stderr, 4000), tail(s.proc.Log(), 4000))
		}
		return r.stdout
	}
	produce := func(mechanism, mech, codec string) {
		prefix, _ := storyRecords(client, mech)
		if out := run(mechanism, "produce", tenantTopic, prefix, fmt.Sprint(secureRecords), codec); !strings.Contains(out, fmt.Sprintf(`"delivered":%d`, secureRecords)) {
			t.Fatalf("produce with %s: %s", mechanism, out)
		}
	}

	// 1. and 2.: SCRAM-SHA-512, then PLAIN, both over SASL_SSL.
	produce("scram-sha-512", "scram", "gzip")
	first := pyRecords(t, run("scram-sha-512", "consume", tenantTopic, tenantGroup, fmt.Sprint(secureFirst), "60"))
	produce("plain", "plain", "snappy")
	second := pyRecords(t, run("plain", "consume", tenantTopic, tenantGroup, fmt.Sprint(2*secureRecords-secureFirst), "60"))
	s.checkStory(client, first, second)

	type jsError struct{ Name, Type, Message string }
	// 3. A wrong password.
	r := as("scram-sha-512", wrongPassword, "auth_error")
	if r.err != nil {
		t.Fatalf("auth_error: %v\n%s%s", r.err, r.stdout, tail(r.stderr, 4000))
	}
	var auth struct{ Error jsError }
	if err := json.Unmarshal([]byte(r.stdout), &auth); err != nil {
		t.Fatalf("auth_error: %v: %s", err, r.stdout)
	}
	if auth.Error.Name != "KafkaJSSASLAuthenticationError" {
		t.Fatalf("wrong password: %+v, want KafkaJSSASLAuthenticationError", auth.Error)
	}
	wantError(t, client, "wrong password", auth.Error.Name+": "+auth.Error.Message, "SASL SCRAM SHA512 authentication failed")

	// 4. Bob's topic and group, and what alice sees. kafkajs's consumer
	// crashes with KafkaJSGroupCoordinatorNotFound once every broker
	// refused FindCoordinator; the broker's GROUP_AUTHORIZATION_FAILED is
	// in kafkajs's debug log of that refusal.
	var denied struct {
		Produce, Group, Coordinator jsError
		Topics                      []string
	}
	if err := json.Unmarshal([]byte(run("scram-sha-512", "denied", otherTopic, tenantTopic, otherGroup)), &denied); err != nil {
		t.Fatal(err)
	}
	if denied.Produce.Type != "TOPIC_AUTHORIZATION_FAILED" || denied.Group.Name != "KafkaJSGroupCoordinatorNotFound" || denied.Coordinator.Type != "GROUP_AUTHORIZATION_FAILED" {
		t.Fatalf("denied: %+v, want TOPIC_AUTHORIZATION_FAILED, and KafkaJSGroupCoordinatorNotFound after GROUP_AUTHORIZATION_FAILED", denied)
	}
	wantError(t, client, "produce to another tenant's topic", denied.Produce.Name+" "+denied.Produce.Type+": "+denied.Produce.Message, "TOPIC_AUTHORIZATION_FAILED")
	wantError(t, client, "consume in another tenant's group", denied.Group.Name+": "+denied.Group.Message+" (debug log: "+denied.Coordinator.Name+" "+denied.Coordinator.Type+": "+denied.Coordinator.Message+")", "Failed to find group coordinator", "GROUP_AUTHORIZATION_FAILED")
	checkTenantTopics(t, client, denied.Topics)
}
