package compat_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// segmentio/kafka-go in the security story (security_test.go): sasl/scram
// (SHA512) and sasl/plain on a Transport (Writer, Client) and a Dialer
// (Reader) with TLS, both over SASL_SSL; a Writer (kafka-go has no
// idempotent producer) and a Reader with a GroupID and CommitMessages.

// kafkaGoSecurity is how kafka-go connects as alice with one mechanism.
type kafkaGoSecurity struct {
	transport *kafka.Transport
	dialer    *kafka.Dialer
}

func (s *secureBroker) kafkaGoAs(t *testing.T, mechanism func(password string) (sasl.Mechanism, error), password string) kafkaGoSecurity {
	t.Helper()
	m, err := mechanism(password)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig := s.tlsConfig()
	return kafkaGoSecurity{
		transport: &kafka.Transport{SASL: m, TLS: tlsConfig, DialTimeout: 5 * time.Second},
		dialer:    &kafka.Dialer{SASLMechanism: m, TLS: tlsConfig, Timeout: 10 * time.Second, DualStack: true},
	}
}

func kafkaGoScram(password string) (sasl.Mechanism, error) {
	return scram.Mechanism(scram.SHA512, tenantUser, password)
}

func kafkaGoPlain(password string) (sasl.Mechanism, error) {
	return plain.Mechanism{Username: tenantUser, Password: password}, nil
}

// write writes w to topic with a Writer (acks all).
func (k kafkaGoSecurity) write(ctx context.Context, addr, topic string, w map[string]string) error {
	wr := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, Transport: k.transport, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond, MaxAttempts: 2}
	defer wr.Close()
	var msgs []kafka.Message
	for key, v := range w {
		msgs = append(msgs, kafka.Message{Key: []byte(key), Value: []byte(v)})
	}
	return wr.WriteMessages(ctx, msgs...)
}

func TestSecurityKafkaGo(t *testing.T) {
	goModuleVersions(t, "github.com/segmentio/kafka-go")
	s := startSecureBroker(t)
	const client = "kafka-go"
	ctx := within(t, 2*time.Minute)
	read := func(k kafkaGoSecurity, group string, max int) ([]record, error) {
		cfg := kafkaGoReaderConfig(s.saslSSL, group, tenantTopic)
		cfg.Dialer = k.dialer
		cfg.JoinGroupBackoff = 200 * time.Millisecond
		cfg.MaxAttempts = 2
		return kafkaGoRead(t, cfg, max)
	}
	story := func(k kafkaGoSecurity, mech string, max int) []record {
		_, w := storyRecords(client, mech)
		if err := k.write(ctx, s.saslSSL, tenantTopic, w); err != nil {
			t.Fatalf("WriteMessages (%s): %v", mech, err)
		}
		got, err := read(k, tenantGroup, max)
		if err != nil {
			t.Fatalf("FetchMessage (%s) after %d records: %v", mech, len(got), err)
		}
		return got
	}

	// 1. and 2.: SCRAM-SHA-512, then PLAIN, both over SASL_SSL.
	alice := s.kafkaGoAs(t, kafkaGoScram, tenantPass)
	first := story(alice, "scram", secureFirst)
	second := story(s.kafkaGoAs(t, kafkaGoPlain, tenantPass), "plain", 2*secureRecords-secureFirst)
	s.checkStory(client, first, second)

	// 3. A wrong password.
	wrong := s.kafkaGoAs(t, kafkaGoScram, wrongPassword)
	_, err := (&kafka.Client{Addr: kafka.TCP(s.saslSSL), Transport: wrong.transport, Timeout: 10 * time.Second}).
		Metadata(ctx, &kafka.MetadataRequest{})
	if !errors.Is(err, kafka.SASLAuthenticationFailed) {
		t.Fatalf("wrong password: Metadata: %v, want kafka.SASLAuthenticationFailed", err)
	}
	wantError(t, client, "wrong password", fmt.Sprintf("%T %v", err, err), "SASL Authentication Failed")

	// 4. Bob's topic and group, and what alice sees. kafka-go's Writer
	// looks topics up in its Transport's metadata of all topics, where
	// the broker lists only what alice may describe (as Kafka does): for
	// the Writer bob's topic does not exist. A Conn asks for the topic by
	// name (DialLeader) and is told TOPIC_AUTHORIZATION_FAILED.
	err = alice.write(ctx, s.saslSSL, otherTopic, map[string]string{"k": "v"})
	var writeErrs kafka.WriteErrors
	if errors.As(err, &writeErrs) && len(writeErrs) > 0 {
		err = writeErrs[0]
	}
	if !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("Writer to %s: %v, want kafka.UnknownTopicOrPartition (the topic is not in alice's metadata)", otherTopic, err)
	}
	wantError(t, client, "produce to another tenant's topic (Writer)", fmt.Sprintf("%T %v", err, err), "Unknown Topic Or Partition")
	conn, err := alice.dialer.DialLeader(ctx, "tcp", s.saslSSL, otherTopic, 0)
	if err == nil {
		conn.Close()
	}
	if !errors.Is(err, kafka.TopicAuthorizationFailed) {
		t.Fatalf("DialLeader to %s: %v, want kafka.TopicAuthorizationFailed", otherTopic, err)
	}
	wantError(t, client, "produce to another tenant's topic (DialLeader)", fmt.Sprintf("%T %v", err, err), "Topic Authorization Failed")
	if _, err = read(alice, otherGroup, 1); !errors.Is(err, kafka.GroupAuthorizationFailed) {
		t.Fatalf("read in %s: %v, want kafka.GroupAuthorizationFailed", otherGroup, err)
	}
	wantError(t, client, "consume in another tenant's group", fmt.Sprintf("%T %v", err, err), "Group Authorization Failed")
	md, err := (&kafka.Client{Addr: kafka.TCP(s.saslSSL), Transport: alice.transport, Timeout: 10 * time.Second}).
		Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("Metadata as alice: %v", err)
	}
	var topics []string
	for _, tp := range md.Topics {
		topics = append(topics, tp.Name)
	}
	checkTenantTopics(t, client, topics)
}
