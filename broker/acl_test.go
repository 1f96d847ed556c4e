package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestACLsWithFranzGo: franz-go's clients against a broker with the
// authorizer on. The connection's principal is User:ANONYMOUS (PLAINTEXT);
// allow.everyone.if.no.acl.found lets it manage ACLs (the cluster has none)
// and act on resources no ACL names. Other tenants' resources carry ACLs
// for their owner only: producing there is TOPIC_AUTHORIZATION_FAILED,
// their group's offsets GROUP_AUTHORIZATION_FAILED, and Metadata does not
// list their topics; ACLs that name ANONYMOUS work at once.
func TestACLsWithFranzGo(t *testing.T) {
	tb := startBroker(t, Config{Authorizer: true, AllowEveryoneIfNoACLFound: true})
	ctx := ctxT(t, 30*time.Second)
	adm := tb.admin()
	for _, name := range []string{"mine", "theirs"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	created, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:other").Topics("theirs").Groups("their-group").
		Operations(kadm.OpAll))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range created {
		if c.Err != nil {
			t.Fatalf("CreateACLs: %v", c.Err)
		}
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !topics.Has("mine") || topics.Has("theirs") {
		t.Errorf("ListTopics shows %v, want mine and not theirs", topics.Names())
	}

	cl := tb.client(kgo.RecordRetries(1), kgo.RequestRetries(1))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "mine", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatalf("produce to a topic without ACLs: %v", err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "theirs", Value: []byte("no")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to another tenant's topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	if _, err := adm.FetchOffsets(ctx, "their-group"); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Errorf("FetchOffsets of another tenant's group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	if _, err := adm.FetchOffsets(ctx, "my-group"); err != nil {
		t.Errorf("FetchOffsets of a group without ACLs: %v", err)
	}

	// A consumer in the other tenant's group: kgo reports the join's
	// GROUP_AUTHORIZATION_FAILED from PollFetches.
	consumer := tb.client(kgo.ConsumerGroup("their-group"), kgo.ConsumeTopics("mine"))
	pollCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var groupErr error
	for groupErr == nil && pollCtx.Err() == nil {
		consumer.PollFetches(pollCtx).EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, kerr.GroupAuthorizationFailed) {
				groupErr = err
			}
		})
	}
	if groupErr == nil {
		t.Errorf("a consumer in another tenant's group saw no GROUP_AUTHORIZATION_FAILED")
	}

	// An ACL naming ANONYMOUS applies at once: now it may write there.
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:ANONYMOUS").Topics("theirs").Operations(kadm.OpWrite)); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "theirs", Value: []byte("granted")}).FirstErr(); err != nil {
		t.Fatalf("produce after an ALLOW of WRITE: %v", err)
	}
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).
		Allow().AllowHosts().Deny().DenyHosts().Operations())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range described {
		if d.Err != nil {
			t.Errorf("DescribeACLs filter %+v: %v", d, d.Err)
		}
		n += len(d.Described)
	}
	if n != 3 {
		t.Errorf("DescribeACLs lists %d ACLs, want 3", n)
	}
}
