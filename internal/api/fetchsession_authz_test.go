package api

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// TestFetchSessionAuthorizedEachFetch: an incremental fetch is authorized
// as a full one is, on every fetch (Kafka's KafkaApis checks READ for each
// partition of the session's context): a READ ACL removed after the session
// began answers its partitions TOPIC_AUTHORIZATION_FAILED, and a new ACL
// lets them be read again.
func TestFetchSessionAuthorizedEachFetch(t *testing.T) {
	tb := startTestBroker(t, Config{Authorizer: acl.Config{Enabled: true, SuperUsers: []string{adminPrincipal.String()}}})
	tp := tb.createTopic(t, "t", 2)
	appendVisible(t, tp.parts[0])
	alice := server.User("alice")
	read := []acl.Binding{binding(acl.Topic, "t", acl.Literal, alice.String(), acl.Read, acl.Allow)}
	setACLs(t, tb.Handler, read)

	r := sessionReq{version: 12, topic: tp, offsets: map[int32]int64{0: 0, 1: 0}}
	resp := serveAs(t, tb.Handler, alice, 1, r.build()).(*kmsg.FetchResponse)
	expectAnswer(t, "full fetch with READ", resp, 0, "p0 err=0 hwm=1 records=true", "p1 err=0 hwm=0 records=false")
	if resp.SessionID <= 0 {
		t.Fatalf("no session created (id %d)", resp.SessionID)
	}
	r.id, r.offsets = resp.SessionID, map[int32]int64{0: 1}

	setACLs(t, tb.Handler, nil)
	r.epoch++
	resp = serveAs(t, tb.Handler, alice, 1, r.build()).(*kmsg.FetchResponse)
	expectAnswer(t, "incremental fetch after the ACL is removed", resp, 0,
		"p0 err=29 hwm=-1 records=false", "p1 err=29 hwm=-1 records=false") // TOPIC_AUTHORIZATION_FAILED

	setACLs(t, tb.Handler, read)
	appendVisible(t, tp.parts[0])
	r.epoch, r.offsets = r.epoch+1, nil
	resp = serveAs(t, tb.Handler, alice, 1, r.build()).(*kmsg.FetchResponse)
	expectAnswer(t, "incremental fetch with READ again", resp, 0, "p0 err=0 hwm=2 records=true", "p1 err=0 hwm=0 records=false")
}
