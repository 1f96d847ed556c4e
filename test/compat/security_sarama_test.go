package compat_test

import (
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// IBM/sarama in the security story (security_test.go): Net.TLS,
// Net.SASL with SCRAM-SHA-512 (a SCRAMClientGeneratorFunc on
// github.com/xdg-go/scram, as sarama's examples/sasl_scram_client does)
// over SASL_SSL and PLAIN over SASL_PLAINTEXT, SaslHandshake v1 (sarama's
// default); the idempotent SyncProducer and a ConsumerGroup with manual
// commits; ClusterAdmin.ListTopics as alice.

// xdgSCRAMClient is sarama's SCRAMClient on xdg-go/scram.
type xdgSCRAMClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (x *xdgSCRAMClient) Begin(user, password, authzID string) error {
	cl, err := x.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *xdgSCRAMClient) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAMClient) Done() bool                            { return x.conv.Done() }

// saramaSASL configures alice with mechanism (sarama.SASLTypeSCRAMSHA512 or
// sarama.SASLTypePlaintext) and password, over TLS when tlsOn.
func (s *secureBroker) saramaSASL(mechanism sarama.SASLMechanism, password string, tlsOn bool) func(*sarama.Config) {
	return func(cfg *sarama.Config) {
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = mechanism
		cfg.Net.SASL.User = tenantUser
		cfg.Net.SASL.Password = password
		if mechanism == sarama.SASLTypeSCRAMSHA512 {
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAMClient{hash: sha512.New} }
		}
		if tlsOn {
			cfg.Net.TLS.Enable = true
			cfg.Net.TLS.Config = s.tlsConfig()
		}
	}
}

// saramaProduceStory produces the story's records of mech with the
// idempotent SyncProducer.
func saramaProduceStory(t *testing.T, addr, client, mech string, configure func(*sarama.Config)) {
	t.Helper()
	cfg := saramaConfig(t)
	configure(cfg)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatalf("sarama producer (%s): %v", mech, err)
	}
	defer p.Close()
	_, w := storyRecords(client, mech)
	var msgs []*sarama.ProducerMessage
	for k, v := range w {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: tenantTopic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(v)})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("sarama SendMessages (%s): %v", mech, err)
	}
}

func TestSecuritySarama(t *testing.T) {
	goModuleVersions(t, "github.com/IBM/sarama", "github.com/xdg-go/scram")
	s := startSecureBroker(t)
	const client = "sarama"
	scramOn := func(password string) func(*sarama.Config) {
		return s.saramaSASL(sarama.SASLTypeSCRAMSHA512, password, true)
	}
	plainOn := s.saramaSASL(sarama.SASLTypePlaintext, tenantPass, false)

	// 1. SCRAM-SHA-512 over SASL_SSL, 2. PLAIN over SASL_PLAINTEXT.
	saramaProduceStory(t, s.saslSSL, client, "scram", scramOn(tenantPass))
	first := saramaConsume(t, s.saslSSL, tenantGroup, tenantTopic, secureFirst, scramOn(tenantPass))
	saramaProduceStory(t, s.saslPlaintext, client, "plain", plainOn)
	second := saramaConsume(t, s.saslPlaintext, tenantGroup, tenantTopic, 2*secureRecords-secureFirst, plainOn)
	s.checkStory(client, first, second)

	// 3. A wrong password.
	cfg := saramaConfig(t)
	scramOn(wrongPassword)(cfg)
	cfg.Metadata.Retry.Max = 1
	if cl, err := sarama.NewClient([]string{s.saslSSL}, cfg); !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
		if cl != nil {
			cl.Close()
		}
		t.Fatalf("wrong password: NewClient: %v, want ErrSASLAuthenticationFailed", err)
	} else {
		wantError(t, client, "wrong password", fmt.Sprintf("%T %v", err, err), "SASL Authentication failed")
	}

	// 4. Bob's topic and group, and what alice sees.
	cfg = saramaConfig(t)
	scramOn(tenantPass)(cfg)
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 1
	p, err := sarama.NewSyncProducer([]string{s.saslSSL}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: otherTopic, Value: sarama.StringEncoder("v")})
	p.Close()
	if !errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
		t.Fatalf("produce to %s: %v, want ErrTopicAuthorizationFailed", otherTopic, err)
	}
	wantError(t, client, "produce to another tenant's topic", err.Error(), "not authorized to access this topic")

	cfg = saramaConfig(t)
	scramOn(tenantPass)(cfg)
	cfg.Consumer.Group.Rebalance.Retry.Max = 0 // the error at once, not after 4 × 2 s
	cg, err := sarama.NewConsumerGroup([]string{s.saslSSL}, otherGroup, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = cg.Consume(ctx, []string{tenantTopic}, &saramaGroupHandler{max: 1, cancel: cancel})
	cg.Close()
	if !errors.Is(err, sarama.ErrGroupAuthorizationFailed) {
		t.Fatalf("consume in %s: %v, want ErrGroupAuthorizationFailed", otherGroup, err)
	}
	wantError(t, client, "consume in another tenant's group", err.Error(), "not authorized to access this group")

	cfg = saramaConfig(t)
	scramOn(tenantPass)(cfg)
	adm, err := sarama.NewClusterAdmin([]string{s.saslSSL}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ClusterAdmin.ListTopics as alice: %v", err)
	}
	var names []string
	for name := range topics {
		names = append(names, name)
	}
	checkTenantTopics(t, client, names)
}
