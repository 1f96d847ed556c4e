package group

import (
	"crypto/sha256"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/tracefmt"
)

// listedTopics is a catalogue that can list its topics (TopicLister);
// topic IDs are hashes of the names (__consumer_offsets is longer than an
// ID).
type listedTopics map[string]int32

func hashedID(name string) [16]byte {
	sum := sha256.Sum256([]byte(name))
	return [16]byte(sum[:16])
}

func (l listedTopics) Partitions(topic string) ([16]byte, int32, bool) {
	n, ok := l[topic]
	return hashedID(topic), n, ok
}

func (l listedTopics) TopicByID(id [16]byte) (string, int32, bool) {
	for name, n := range l {
		if hashedID(name) == id {
			return name, n, true
		}
	}
	return "", 0, false
}

func (l listedTopics) TopicNames() []string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	return names
}

// regexHarness is a loaded coordinator over a listable catalogue.
type regexHarness struct {
	t      *testing.T
	c      *Coordinator
	topics listedTopics
	now    time.Time
	id     uint64
}

func newRegexHarness(t *testing.T) *regexHarness {
	h := &regexHarness{t: t, topics: listedTopics{"orders": 2, "orders-v2": 1, "payments": 3, OffsetsTopic: 1}, now: tracefmt.Epoch}
	h.c = New(Config{NodeID: 1, Host: "127.0.0.1", Port: 9092, Topics: h.topics, NewID: func() string { return "x" }})
	h.c.Loaded(h.now)
	return h
}

func (h *regexHarness) do(req kmsg.Request) kmsg.Response {
	h.t.Helper()
	h.id++
	h.c.Handle(Request{ID: h.id, Now: h.now, ClientID: "c", ClientHost: "/127.0.0.1", Body: req})
	rd := h.c.Ready()
	if len(rd.Responses) != 1 {
		h.t.Fatalf("%d responses, want 1", len(rd.Responses))
	}
	return rd.Responses[0].Body
}

func (h *regexHarness) heartbeat(member string, epoch int32, regex *string, owned map[string][]int32) *kmsg.ConsumerGroupHeartbeatResponse {
	h.t.Helper()
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID, r.MemberEpoch = "g", member, epoch
	r.RebalanceTimeoutMillis = -1
	if epoch == 0 {
		r.RebalanceTimeoutMillis = 30000
	}
	r.SubscribedTopicRegex = regex
	if owned != nil {
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for t, ps := range owned {
			r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: hashedID(t), Partitions: ps})
		}
	}
	return h.do(r).(*kmsg.ConsumerGroupHeartbeatResponse)
}

// assigned renders a heartbeat's assignment as topic -> partitions.
func assignedTopics(t *testing.T, resp *kmsg.ConsumerGroupHeartbeatResponse) map[string][]int32 {
	t.Helper()
	if resp.Assignment == nil {
		t.Fatalf("no assignment in %+v", resp)
	}
	m := map[string][]int32{}
	for _, at := range resp.Assignment.Topics {
		name := ""
		for _, n := range []string{"orders", "orders-v2", "payments", "new-orders", OffsetsTopic} {
			if hashedID(n) == at.TopicID {
				name = n
			}
		}
		m[name] = slices.Sorted(slices.Values(at.Partitions))
	}
	return m
}

func keys(m map[string][]int32) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestConsumerRegexSubscription: KIP-848 SubscribedTopicRegex (franz-go's
// Test848RegexBrokerResolves): the regex matches whole names, internal
// topics included; a first heartbeat may carry only a regex; a new matching
// topic is assigned on a later heartbeat; OffsetDelete treats matched
// topics as subscribed; ConsumerGroupDescribe shows the regex; an invalid
// regex is INVALID_REGULAR_EXPRESSION.
func TestConsumerRegexSubscription(t *testing.T) {
	h := newRegexHarness(t)

	bad := "orders("
	if resp := h.heartbeat("m1", 0, &bad, nil); resp.ErrorCode != kerr.InvalidRegularExpression.Code {
		t.Fatalf("invalid regex: %+v", resp)
	}

	// franz-go's wrapping of ConsumeTopics("orders", "__consumer_offsets").
	re := ".*(?:(?:orders)|(?:__consumer_offsets)).*"
	resp := h.heartbeat("m1", 0, &re, nil)
	if resp.ErrorCode != 0 {
		t.Fatalf("join with a regex only: %+v", resp)
	}
	got := assignedTopics(t, resp)
	if want := []string{OffsetsTopic, "orders", "orders-v2"}; !slices.Equal(keys(got), want) {
		t.Fatalf("assigned %v, want %v", got, want)
	}
	if !slices.Equal(got["orders"], []int32{0, 1}) {
		t.Fatalf("orders: %v", got["orders"])
	}
	epoch := resp.MemberEpoch

	// A whole-name match: "orders" alone does not match orders-v2.
	h2 := newRegexHarness(t)
	exact := "orders"
	if got := assignedTopics(t, h2.heartbeat("m1", 0, &exact, nil)); !slices.Equal(keys(got), []string{"orders"}) {
		t.Fatalf("regex %q assigned %v", exact, got)
	}

	// A topic created later that matches joins the assignment.
	h.topics["new-orders"] = 2
	resp = h.heartbeat("m1", epoch, nil, got)
	if resp.ErrorCode != 0 || resp.MemberEpoch <= epoch {
		t.Fatalf("heartbeat after a matching topic appeared: %+v (epoch was %d)", resp, epoch)
	}
	if got := assignedTopics(t, resp); !slices.Equal(got["new-orders"], []int32{0, 1}) {
		t.Fatalf("new-orders not assigned: %v", got)
	}

	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	for _, name := range []string{"new-orders", "payments"} {
		tp := kmsg.NewOffsetDeleteRequestTopic()
		tp.Topic = name
		tp.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}
		od.Topics = append(od.Topics, tp)
	}
	odr := h.do(od).(*kmsg.OffsetDeleteResponse)
	if odr.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code || odr.Topics[1].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetDelete: %+v", odr.Topics)
	}

	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"g"}
	dr := h.do(d).(*kmsg.ConsumerGroupDescribeResponse)
	if len(dr.Groups) != 1 || len(dr.Groups[0].Members) != 1 || dr.Groups[0].Members[0].SubscribedTopicRegex == nil || *dr.Groups[0].Members[0].SubscribedTopicRegex != re {
		t.Fatalf("describe: %+v", dr.Groups)
	}

	// An empty regex unsubscribes: nothing left to own.
	empty := ""
	resp = h.heartbeat("m1", resp.MemberEpoch, &empty, nil)
	if resp.ErrorCode != 0 {
		t.Fatalf("clearing the regex: %+v", resp)
	}
}
