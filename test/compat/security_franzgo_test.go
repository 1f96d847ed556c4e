package compat_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// franz-go (kgo, kadm) in the security story (security_test.go): SCRAM-
// SHA-512 over SASL_SSL (kgo.DialTLSConfig), PLAIN over SASL_PLAINTEXT,
// the idempotent producer (its default), a group consumer with manual
// commits.

// franzClient is a kgo client of the story, closed when the test ends.
func franzClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.RetryTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// franzProduce produces w to topic and returns the first error.
func franzProduce(t *testing.T, cl *kgo.Client, topic string, w map[string]string) error {
	t.Helper()
	var recs []*kgo.Record
	for k, v := range w {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(v)})
	}
	return cl.ProduceSync(within(t, 30*time.Second), recs...).FirstErr()
}

// franzConsume consumes max records of topic in group, commits them and
// leaves the group; a poll error ends it early and is returned.
func franzConsume(t *testing.T, group, topic string, max int, opts ...kgo.Opt) ([]record, error) {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.RetryTimeout(10*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := within(t, 30*time.Second)
	var got []record
	var recs []*kgo.Record
	for len(got) < max && ctx.Err() == nil {
		fs := cl.PollRecords(ctx, max-len(got))
		if err := fs.Err0(); err != nil && ctx.Err() == nil {
			return got, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, r)
			got = append(got, record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
		})
	}
	if len(got) < max {
		t.Fatalf("franz-go consumer of %s got %d records in 30 s, want %d", group, len(got), max)
	}
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("franz-go CommitRecords: %v", err)
	}
	return got, nil
}

func TestSecurityFranzGo(t *testing.T) {
	goModuleVersions(t, "github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kadm")
	s := startSecureBroker(t)
	const client = "franz-go"
	scramOpts := func(pass string) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(s.saslSSL), kgo.DialTLSConfig(s.tlsConfig()),
			kgo.SASL(scram.Auth{User: tenantUser, Pass: pass}.AsSha512Mechanism())}
	}
	plainOpts := []kgo.Opt{kgo.SeedBrokers(s.saslPlaintext),
		kgo.SASL(plain.Auth{User: tenantUser, Pass: tenantPass}.AsMechanism())}

	// 1. SASL_SSL + SCRAM-SHA-512.
	_, scramRecords := storyRecords(client, "scram")
	if err := franzProduce(t, franzClient(t, scramOpts(tenantPass)...), tenantTopic, scramRecords); err != nil {
		t.Fatalf("produce over SASL_SSL with SCRAM-SHA-512: %v", err)
	}
	first, err := franzConsume(t, tenantGroup, tenantTopic, secureFirst, scramOpts(tenantPass)...)
	if err != nil {
		t.Fatalf("consume over SASL_SSL with SCRAM-SHA-512: %v", err)
	}
	// 2. SASL_PLAINTEXT + PLAIN.
	_, plainRecords := storyRecords(client, "plain")
	if err := franzProduce(t, franzClient(t, plainOpts...), tenantTopic, plainRecords); err != nil {
		t.Fatalf("produce over SASL_PLAINTEXT with PLAIN: %v", err)
	}
	second, err := franzConsume(t, tenantGroup, tenantTopic, 2*secureRecords-secureFirst, plainOpts...)
	if err != nil {
		t.Fatalf("consume over SASL_PLAINTEXT with PLAIN: %v", err)
	}
	s.checkStory(client, first, second)

	// 3. A wrong password.
	err = franzClient(t, scramOpts(wrongPassword)...).Ping(within(t, 20*time.Second))
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	wantError(t, client, "wrong password", err.Error(), "SASL_AUTHENTICATION_FAILED")

	// 4. Bob's topic and group, and what alice sees.
	alice := franzClient(t, scramOpts(tenantPass)...)
	err = franzProduce(t, alice, otherTopic, map[string]string{"k": "v"})
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to %s: %v, want TOPIC_AUTHORIZATION_FAILED", otherTopic, err)
	}
	wantError(t, client, "produce to another tenant's topic", err.Error(), "TOPIC_AUTHORIZATION_FAILED")
	if _, err = franzConsume(t, otherGroup, tenantTopic, 1, scramOpts(tenantPass)...); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("consume in %s: %v, want GROUP_AUTHORIZATION_FAILED", otherGroup, err)
	}
	wantError(t, client, "consume in another tenant's group", err.Error(), "GROUP_AUTHORIZATION_FAILED")
	topics, err := kadm.NewClient(alice).ListTopicsWithInternal(within(t, 20*time.Second))
	if err != nil {
		t.Fatalf("kadm ListTopicsWithInternal as alice: %v", err)
	}
	checkTenantTopics(t, client, topics.Names())
}
