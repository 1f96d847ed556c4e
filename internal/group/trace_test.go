package group

import (
	"bytes"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/tracefmt"
)

// Golden traces (etcd raft's interaction tests, pebble's datadriven): each
// testdata/*.txt is a script of inputs, each followed by "----" and the
// full output they caused: records persisted and responses released, in
// order. `go test ./internal/group -rewrite` regenerates the outputs; the
// diff is the review.

func TestTraces(t *testing.T) {
	tracefmt.RunScripts(t, "./internal/group", func(t *testing.T) func(string) string {
		h := newHarness()
		return func(cmd string) string { return h.run(t, cmd) }
	})
}

// harness drives a Coordinator from script commands.
type harness struct {
	cfg       Config
	c         *Coordinator
	now       time.Time
	nextReqID uint64
	nextID    int
	persisted []Record
	topics    fakeTopics
}

type fakeTopics map[string]int32

func topicID(name string) [16]byte {
	var id [16]byte
	copy(id[:], name)
	return id
}

func (f fakeTopics) Partitions(topic string) ([16]byte, int32, bool) {
	n, ok := f[topic]
	return topicID(topic), n, ok
}

func (f fakeTopics) TopicByID(id [16]byte) (string, int32, bool) {
	name := string(bytes.TrimRight(id[:], "\x00"))
	n, ok := f[name]
	return name, n, ok
}

func newHarness() *harness {
	h := &harness{now: tracefmt.Epoch, topics: fakeTopics{"t1": 3, "t2": 2}}
	h.configure(tracefmt.Args{})
	return h
}

func (h *harness) configure(args tracefmt.Args) {
	h.cfg = Config{NodeID: 1, Host: "127.0.0.1", Port: 9092, Topics: h.topics}
	h.cfg.NewID = func() string { h.nextID++; return strconv.Itoa(h.nextID) }
	if v, ok := args["delay"]; ok {
		h.cfg.InitialRebalanceDelay = tracefmt.MustDuration(v)
	}
	if v, ok := args["partitions"]; ok {
		n, _ := strconv.Atoi(v)
		h.cfg.OffsetsPartitions = int32(n)
	}
	if v, ok := args["owns"]; ok {
		owned := map[int32]bool{}
		for _, p := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(p)
			owned[int32(n)] = true
		}
		h.cfg.Owns = func(p int32) bool { return owned[p] }
	}
	h.c = New(h.cfg)
	if args["loading"] != "true" {
		h.c.Loaded(h.now)
	}
}

// parsePartitions parses "t1/0+1,t2/0" into topic -> partitions, in order.
func parsePartitions(s string) (topics []string, parts map[string][]int32) {
	parts = map[string][]int32{}
	if s == "" {
		return nil, parts
	}
	for _, tp := range strings.Split(s, ",") {
		topic, ps, _ := strings.Cut(tp, "/")
		if _, ok := parts[topic]; !ok {
			topics = append(topics, topic)
			parts[topic] = []int32{}
		}
		if ps == "" {
			continue
		}
		for _, p := range strings.Split(ps, "+") {
			n, _ := strconv.Atoi(p)
			parts[topic] = append(parts[topic], int32(n))
		}
	}
	return topics, parts
}

func (h *harness) run(t *testing.T, line string) string {
	fields := strings.Fields(line)
	cmd, args := fields[0], tracefmt.ParseArgs(fields[1:])
	var req kmsg.Request
	version := int16(args.Int("v", -1))
	switch cmd {
	case "config":
		h.configure(args)
		return ""
	case "loaded":
		h.c.Loaded(h.now)
		return h.ready()
	case "advance":
		h.now = h.now.Add(tracefmt.MustDuration(fields[1]))
		h.c.Tick(h.now)
		return h.ready()
	case "restart":
		// A new coordinator replays what the old one persisted.
		h.c = New(h.cfg)
		if err := h.c.Load(h.persisted); err != nil {
			t.Fatal(err)
		}
		h.c.Loaded(h.now)
		return fmt.Sprintf("replayed %d records\n", len(h.persisted)) + h.state()
	case "state":
		return h.state()
	case "find":
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorType = int8(args.Int("type", 0))
		if k, ok := args["keys"]; ok {
			r.CoordinatorKeys = strings.Split(k, ",")
		}
		r.CoordinatorKey = args["key"]
		req = r
	case "join":
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group = args["group"]
		r.MemberID = args["member"]
		r.InstanceID = args.OptString("instance")
		r.SessionTimeoutMillis = int32(args.Int("session", 10000))
		r.RebalanceTimeoutMillis = int32(args.Int("rebalance", 20000))
		r.ProtocolType = "consumer"
		if v, ok := args["type"]; ok {
			r.ProtocolType = v
		}
		// protocols=range:t1+t2;roundrobin:t1
		for _, p := range strings.Split(args["protocols"], ";") {
			if p == "" {
				continue
			}
			name, topics, _ := strings.Cut(p, ":")
			md := kmsg.NewConsumerMemberMetadata()
			if topics != "" {
				md.Topics = strings.Split(topics, "+")
			}
			r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: name, Metadata: md.AppendTo(nil)})
		}
		req = r
	case "sync":
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		r.Generation = int32(args.Int("gen", 0))
		r.InstanceID = args.OptString("instance")
		r.ProtocolType = args.OptString("ptype")
		r.Protocol = args.OptString("protocol")
		// assign=m1:t1/0+1,t2/0;m2:t1/2
		for _, a := range strings.Split(args["assign"], ";") {
			if a == "" {
				continue
			}
			id, tps, _ := strings.Cut(a, ":")
			topics, parts := parsePartitions(tps)
			as := kmsg.NewConsumerMemberAssignment()
			for _, topic := range topics {
				as.Topics = append(as.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: topic, Partitions: parts[topic]})
			}
			r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: as.AppendTo(nil)})
		}
		req = r
	case "heartbeat":
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		r.Generation = int32(args.Int("gen", 0))
		r.InstanceID = args.OptString("instance")
		req = r
	case "leave":
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		// members=m1,inst:i1,m2/inst:i2
		for _, m := range strings.Split(args["members"], ",") {
			if m == "" {
				continue
			}
			lm := kmsg.NewLeaveGroupRequestMember()
			id, inst, _ := strings.Cut(m, "/")
			if strings.HasPrefix(id, "inst:") {
				id, inst = "", strings.TrimPrefix(id, "inst:")
			} else {
				inst = strings.TrimPrefix(inst, "inst:")
			}
			lm.MemberID = id
			if inst != "" {
				lm.InstanceID = &inst
			}
			r.Members = append(r.Members, lm)
		}
		req = r
	case "commit":
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		r.Generation = int32(args.Int("gen", -1))
		r.InstanceID = args.OptString("instance")
		// offsets=t1/0=10,t1/1=20@meta
		for _, o := range strings.Split(args["offsets"], ",") {
			tp, rest, _ := strings.Cut(o, "=")
			off, md, hasMD := strings.Cut(rest, "@")
			topic, ps, _ := strings.Cut(tp, "/")
			p, _ := strconv.Atoi(ps)
			n, _ := strconv.ParseInt(off, 10, 64)
			var rt *kmsg.OffsetCommitRequestTopic
			for i := range r.Topics {
				if r.Topics[i].Topic == topic {
					rt = &r.Topics[i]
				}
			}
			if rt == nil {
				r.Topics = append(r.Topics, kmsg.OffsetCommitRequestTopic{Topic: topic, TopicID: topicID(topic)})
				rt = &r.Topics[len(r.Topics)-1]
			}
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = int32(p), n
			if hasMD {
				if md == "BIG" {
					md = strings.Repeat("x", 5000)
				}
				rp.Metadata = &md
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req = r
	case "fetch":
		r := kmsg.NewPtrOffsetFetchRequest()
		if version < 0 {
			version = 8
		}
		parseTopics := func(s string) (out []kmsg.OffsetFetchRequestGroupTopic) {
			if s == "*" {
				return nil
			}
			topics, parts := parsePartitions(s)
			out = []kmsg.OffsetFetchRequestGroupTopic{}
			for _, topic := range topics {
				out = append(out, kmsg.OffsetFetchRequestGroupTopic{Topic: topic, TopicID: topicID(topic), Partitions: parts[topic]})
			}
			return out
		}
		if version >= 8 {
			// groups=g1:t1/0+1;g2:*
			for _, g := range strings.Split(args["groups"], ";") {
				name, topics, _ := strings.Cut(g, ":")
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = name
				rg.Topics = parseTopics(topics)
				r.Groups = append(r.Groups, rg)
			}
		} else {
			r.Group = args["group"]
			for _, rt := range parseTopics(args["topics"]) {
				r.Topics = append(r.Topics, kmsg.OffsetFetchRequestTopic{Topic: rt.Topic, Partitions: rt.Partitions})
			}
		}
		r.RequireStable = args["stable"] == "true"
		req = r
	case "txn-commit":
		if version < 0 {
			version = 5 // v6 names topics by ID; the broker serves 0-5
		}
		r := kmsg.NewPtrTxnOffsetCommitRequest()
		r.TransactionalID, r.Group, r.MemberID = "tx", args["group"], args["member"]
		r.ProducerID, r.ProducerEpoch = int64(args.Int("pid", 1)), int16(args.Int("epoch", 0))
		r.Generation = int32(args.Int("gen", -1))
		r.InstanceID = args.OptString("instance")
		// offsets=t1/0=10,t1/1=20
		for _, o := range strings.Split(args["offsets"], ",") {
			tp, off, _ := strings.Cut(o, "=")
			topic, ps, _ := strings.Cut(tp, "/")
			p, _ := strconv.Atoi(ps)
			n, _ := strconv.ParseInt(off, 10, 64)
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = int32(p), n
			r.Topics = append(r.Topics, kmsg.TxnOffsetCommitRequestTopic{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{rp}})
		}
		req = r
	case "txn-marker":
		r := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = int64(args.Int("pid", 1)), int16(args.Int("epoch", 0)), args["commit"] == "true"
		m.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: OffsetsTopic, Partitions: []int32{int32(args.Int("partition", 0))}}}
		r.Markers = append(r.Markers, m)
		req = r
	case "list":
		r := kmsg.NewPtrListGroupsRequest()
		if v := args["states"]; v != "" {
			r.StatesFilter = strings.Split(v, ",")
		}
		if v := args["types"]; v != "" {
			r.TypesFilter = strings.Split(v, ",")
		}
		req = r
	case "describe":
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = strings.Split(args["groups"], ",")
		req = r
	case "delete":
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = strings.Split(args["groups"], ",")
		req = r
	case "offset-delete":
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = args["group"]
		topics, parts := parsePartitions(args["topics"])
		for _, topic := range topics {
			rt := kmsg.NewOffsetDeleteRequestTopic()
			rt.Topic = topic
			for _, p := range parts[topic] {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: p})
			}
			r.Topics = append(r.Topics, rt)
		}
		req = r
	default:
		if r := h.run848(cmd, args); r != nil {
			req = r
			break
		}
		t.Fatalf("unknown command %q", cmd)
	}
	if version < 0 {
		version = req.MaxVersion()
	}
	req.SetVersion(version)
	h.nextReqID++
	h.c.Handle(Request{ID: h.nextReqID, Now: h.now, ClientID: args["client"], ClientHost: "/127.0.0.1", Body: req})
	return fmt.Sprintf("#%d %s v%d\n", h.nextReqID, kmsg.NameForKey(req.Key()), version) + h.ready()
}

// ready renders the coordinator's Ready and keeps its records as the
// "disk" for restart.
func (h *harness) ready() string {
	rd := h.c.Ready()
	var b strings.Builder
	for _, r := range rd.Records {
		h.persisted = append(h.persisted, r)
		b.WriteString("persist " + formatRecord(r) + "\n")
	}
	for _, r := range rd.Responses {
		fmt.Fprintf(&b, "reply #%d %s\n", r.ID, formatValue(reflect.ValueOf(r.Body).Elem()))
	}
	if next := h.c.NextDeadline(); !next.IsZero() {
		fmt.Fprintf(&b, "next deadline +%s\n", next.Sub(tracefmt.Epoch))
	}
	return b.String()
}

func (h *harness) state() string {
	var b strings.Builder
	for _, g := range h.c.sortedGroups() {
		fmt.Fprintf(&b, "group %s %s %s gen=%d type=%q protocol=%q leader=%q\n", g.name, g.kind, g.stateName(), g.generation, g.protocolType, g.protocol, g.leader)
		for _, m := range g.members {
			inst := ""
			if m.instanceID != nil {
				inst = " instance=" + *m.instanceID
			}
			fmt.Fprintf(&b, "  member %s%s client=%s session=%s %s %s\n", m.id, inst, m.clientID, m.sessionTimeout, formatBytes(m.metadata(g.protocol), false), formatBytes(m.assignment, true))
		}
		for _, m := range g.cmembers {
			fmt.Fprintf(&b, "  consumer member %s epoch=%d subscribed=%v assigned=%s\n", m.id, m.epoch, m.subscribed, formatAssignment(m.assigned))
		}
		for _, tp := range g.sortedOffsets() {
			o := g.offsets[tp]
			fmt.Fprintf(&b, "  offset %s/%d=%d epoch=%d metadata=%q\n", tp.topic, tp.partition, o.offset, o.leaderEpoch, o.metadata)
		}
		for _, pid := range sortedPIDs(g.pendingTxns) {
			pending := &group{offsets: g.pendingTxns[pid]}
			for _, tp := range pending.sortedOffsets() {
				fmt.Fprintf(&b, "  pending producer=%d %s/%d=%d\n", pid, tp.topic, tp.partition, pending.offsets[tp].offset)
			}
		}
	}
	return b.String()
}

func formatRecord(r Record) string {
	prefix := fmt.Sprintf("p%d ", r.Partition)
	switch int16(r.Key[0])<<8 | int16(r.Key[1]) {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		k.ReadFrom(r.Key)
		s := prefix + fmt.Sprintf("offset %s %s/%d", k.Group, k.Topic, k.Partition)
		if r.Value == nil {
			return s + " tombstone"
		}
		var v kmsg.OffsetCommitValue
		v.ReadFrom(r.Value)
		return s + fmt.Sprintf(" = %d epoch=%d metadata=%q at=+%s (v%d)", v.Offset, v.LeaderEpoch, v.Metadata, time.UnixMilli(v.CommitTimestamp).Sub(tracefmt.Epoch), v.Version)
	case pendingKeyVersion:
		name, pid, tp, _ := parsePendingKey(r.Key)
		s := prefix + fmt.Sprintf("pending %s producer=%d %s/%d", name, pid, tp.topic, tp.partition)
		if r.Value == nil {
			return s + " tombstone"
		}
		var v kmsg.OffsetCommitValue
		v.ReadFrom(r.Value)
		return s + fmt.Sprintf(" = %d", v.Offset)
	case 2:
		var k kmsg.GroupMetadataKey
		k.ReadFrom(r.Key)
		s := prefix + "group " + k.Group
		if r.Value == nil {
			return s + " tombstone"
		}
		var v kmsg.GroupMetadataValue
		v.ReadFrom(r.Value)
		return s + " " + formatValue(reflect.ValueOf(v))
	}
	return prefix + fmt.Sprintf("key %x value %x", r.Key, r.Value)
}

// formatValue renders a kmsg struct compactly (tracefmt.Value), consumer
// protocol bytes decoded.
func formatValue(v reflect.Value) string {
	return tracefmt.Value(v, func(field string, b []byte) string {
		return formatBytes(b, strings.Contains(field, "Assignment"))
	}, "MemberAssignment")
}

// formatBytes decodes consumer protocol metadata or assignments.
func formatBytes(b []byte, assignment bool) string {
	if b == nil {
		return "nil"
	}
	if len(b) == 0 {
		return `""`
	}
	if assignment {
		var as kmsg.ConsumerMemberAssignment
		if err := as.ReadFrom(b); err == nil {
			var tps []string
			for _, t := range as.Topics {
				tps = append(tps, fmt.Sprintf("%s/%s", t.Topic, joinInts(t.Partitions)))
			}
			return "assign(" + strings.Join(tps, ",") + ")"
		}
	} else {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(b); err == nil {
			return "meta(" + strings.Join(md.Topics, ",") + ")"
		}
	}
	return fmt.Sprintf("%x", b)
}

func joinInts(ps []int32) string {
	var s []string
	for _, p := range ps {
		s = append(s, strconv.Itoa(int(p)))
	}
	return strings.Join(s, "+")
}

func formatAssignment(a map[[16]byte][]int32) string {
	var parts []string
	for id, ps := range a {
		parts = append(parts, fmt.Sprintf("%s/%s", bytes.TrimRight(id[:], "\x00"), joinInts(ps)))
	}
	sort.Strings(parts)
	return "(" + strings.Join(parts, ",") + ")"
}

func sortedPIDs(m map[int64]pendingTxn) []int64 {
	var ids []int64
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
