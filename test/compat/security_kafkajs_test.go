package compat_test

import (
	"encoding/json"
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
	c := storyScript{s: s, client: client, as: func(_, mechanism, password string, args ...string) result {
		config, err := json.Marshal(settings{
			SSL:  map[string][]string{"ca": {s.caPEM()}},
			SASL: map[string]string{"mechanism": strings.ToLower(mechanism), "username": tenantUser, "password": password},
		})
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"KAFKAJS_NO_PARTITIONER_WARNING=1", "SUSHKA_COMPAT_CONFIG=" + string(config)}
		return runCmd(2*time.Minute, dir, env, "", "node", append([]string{"client.js", s.saslSSL}, args...)...)
	}}

	// 1. and 2.: SCRAM-SHA-512, then PLAIN, both over SASL_SSL (kafkajs's
	// mechanisms are lower case: scram-sha-512, plain).
	c.story("SASL_SSL", []string{"gzip"}, []string{"snappy"})

	type jsError struct{ Name, Type, Message string }
	// 3. A wrong password.
	var auth struct{ Error jsError }
	c.wrongPassword(&auth, "auth_error")
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
	c.denied(&denied)
	if denied.Produce.Type != "TOPIC_AUTHORIZATION_FAILED" || denied.Group.Name != "KafkaJSGroupCoordinatorNotFound" || denied.Coordinator.Type != "GROUP_AUTHORIZATION_FAILED" {
		t.Fatalf("denied: %+v, want TOPIC_AUTHORIZATION_FAILED, and KafkaJSGroupCoordinatorNotFound after GROUP_AUTHORIZATION_FAILED", denied)
	}
	wantError(t, client, "produce to another tenant's topic", denied.Produce.Name+" "+denied.Produce.Type+": "+denied.Produce.Message, "TOPIC_AUTHORIZATION_FAILED")
	wantError(t, client, "consume in another tenant's group", denied.Group.Name+": "+denied.Group.Message+" (debug log: "+denied.Coordinator.Name+" "+denied.Coordinator.Type+": "+denied.Coordinator.Message+")", "Failed to find group coordinator", "GROUP_AUTHORIZATION_FAILED")
	checkTenantTopics(t, client, denied.Topics)
}
