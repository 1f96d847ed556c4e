package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetsExpire: offsets of a group with no members expire
// offsets.retention after their commit (tombstones persisted, the group
// gone), not a millisecond before; a group with a live member keeps them.
func TestOffsetsExpire(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := New(Config{NodeID: 1, Host: "h", Port: 9092, OffsetsRetention: time.Hour})
	c.Loaded(t0)
	id := uint64(0)
	handle := func(now time.Time, body kmsg.Request) Ready {
		id++
		c.Handle(Request{ID: id, Now: now, ClientID: "c", ClientHost: "/127.0.0.1", Body: body})
		return c.Ready()
	}
	handle(t0, commitReq("simple", -1, "", map[int32]int64{0: 5, 1: 6}))
	handle(t0.Add(30*time.Minute), commitReq("later", -1, "", map[int32]int64{0: 1}))

	// A classic group with a member keeps its offsets however old.
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType, join.MemberID = 4, "live", "consumer", ""
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30_000, 30_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
	rd := handle(t0, join) // MEMBER_ID_REQUIRED with the id
	member := rd.Responses[0].Body.(*kmsg.JoinGroupResponse).MemberID
	join.MemberID = member
	handle(t0, join)
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.MemberID, sync.Generation = 3, "live", member, 1
	handle(t0, sync)
	handle(t0, commitReq("live", 1, member, map[int32]int64{0: 9}))
	heartbeat := func(now time.Time) {
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Version, hb.Group, hb.MemberID, hb.Generation = 3, "live", member, 1
		handle(now, hb)
	}

	// Just before the hour: nothing expires.
	heartbeat(t0.Add(time.Hour - time.Millisecond))
	c.Tick(t0.Add(time.Hour - time.Millisecond))
	if rd := c.Ready(); len(rd.Records) != 0 || len(c.groups["simple"].offsets) != 2 {
		t.Fatalf("expired early: %d records", len(rd.Records))
	}
	// At the hour: "simple" goes (two offset tombstones, one group
	// tombstone), "later" (committed 30 min after) and "live" stay.
	heartbeat(t0.Add(time.Hour))
	c.Tick(t0.Add(time.Hour))
	rd = c.Ready()
	if len(rd.Records) != 3 || rd.Records[0].Value != nil || rd.Records[2].Value != nil {
		t.Fatalf("expiry persisted %+v, want 3 tombstones", rd.Records)
	}
	if c.groups["simple"] != nil || c.groups["later"] == nil || len(c.groups["live"].offsets) != 1 {
		t.Fatal("wrong groups expired")
	}
	// Replaying the tombstones gives the same state.
	c2 := New(Config{NodeID: 1, Host: "h", Port: 9092})
	var all []Record
	all = append(all, offsetRecordsFor(t, c, "later")...)
	all = append(all, rd.Records...)
	if err := c2.Load(all); err != nil || c2.groups["simple"] != nil {
		t.Fatalf("replay of the tombstones: %v", err)
	}
	// Much later, with the member still heartbeating, "live" keeps its
	// offset; "later" expires.
	heartbeat(t0.Add(2 * time.Hour))
	c.Tick(t0.Add(2 * time.Hour))
	c.Ready()
	if c.groups["later"] != nil || len(c.groups["live"].offsets) != 1 {
		t.Fatal("a group with a member lost its offsets, or an empty one kept them")
	}
}

// offsetRecordsFor returns the records that persist group's offsets now.
func offsetRecordsFor(t *testing.T, c *Coordinator, group string) []Record {
	t.Helper()
	g := c.groups[group]
	var recs []Record
	for _, tp := range g.sortedOffsets() {
		o := g.offsets[tp]
		recs = append(recs, c.offsetRecord(group, tp, &o))
	}
	return recs
}
