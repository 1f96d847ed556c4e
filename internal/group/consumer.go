package group

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-848: the consumer group protocol. The coordinator computes the
// assignment itself (server-side assignors "uniform" and "range") and each
// member reconciles towards its target through heartbeats: partitions to
// give up are revoked first (the member confirms by heartbeating without
// them), and a partition is handed to its new owner only once the old one
// has let it go. The group epoch advances on every membership or
// subscription change; a member's epoch reaches the target assignment's
// epoch once it has nothing left to revoke.
//
// Not persisted: KIP-848 group records (ConsumerGroupMetadata and friends)
// are not written, so after a restart the members are unknown
// (UNKNOWN_MEMBER_ID) and rejoin with epoch 0; committed offsets survive.

// Server-side assignors.
const (
	assignorUniform = "uniform"
	assignorRange   = "range"
)

// partitions is a set of topic-ID/partition pairs.
type partitions map[[16]byte][]int32

// consumerState is a KIP-848 group's state.
type consumerState struct {
	cmembers    []*cmember // in join order
	groupEpoch  int32
	targetEpoch int32
	assignor    string
	// subscriptionSig is the subscribed topics' partition counts the target
	// was computed for: a topic growing changes it.
	subscriptionSig string
}

// cmember is a KIP-848 member.
type cmember struct {
	id               string
	instanceID       *string
	rackID           *string
	clientID         string
	clientHost       string
	epoch            int32
	rebalanceTimeout time.Duration
	subscribed       []string
	regex            string         // SubscribedTopicRegex, "" for none
	re               *regexp.Regexp // regex anchored at both ends, nil for none
	assignor         string

	target   partitions // what the coordinator wants the member to own
	assigned partitions // what the member was told to own
	revoking partitions // told to give up, not yet confirmed
	lastSent string     // the assignment last sent, to send only changes

	sessionDeadline   time.Time
	rebalanceDeadline time.Time // set while revoking
}

func (g *group) cmember(id string) *cmember {
	for _, m := range g.cmembers {
		if m.id == id {
			return m
		}
	}
	return nil
}

// consumerStateName is Kafka's ConsumerGroupState name.
func (g *group) consumerStateName() string {
	switch {
	case len(g.cmembers) == 0:
		return "Empty"
	case g.targetEpoch < g.groupEpoch:
		return "Assigning"
	}
	for _, m := range g.cmembers {
		if m.epoch != g.targetEpoch || len(m.revoking) > 0 || !samePartitions(m.assigned, m.target) {
			return "Reconciling"
		}
	}
	return "Stable"
}

func heartbeatError(req *kmsg.ConsumerGroupHeartbeatRequest, code int16, msg string) *kmsg.ConsumerGroupHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.ErrorCode = code
	if msg != "" {
		resp.ErrorMessage = &msg
	}
	return resp
}

func (c *Coordinator) consumerHeartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	fail := func(code int16, msg string) *kmsg.ConsumerGroupHeartbeatResponse {
		return heartbeatError(req, code, msg)
	}
	if req.Group == "" {
		return fail(kerr.InvalidRequest.Code, "GroupId can't be empty.")
	}
	if code := c.checkCoordinator(req.Group); code != 0 {
		return fail(code, "")
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != assignorUniform && *req.ServerAssignor != assignorRange {
		return fail(kerr.UnsupportedAssignor.Code, "ServerAssignor "+*req.ServerAssignor+" is not supported. Supported assignors: uniform, range.")
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != "" {
		if _, err := compileTopicRegex(*req.SubscribedTopicRegex); err != nil {
			return fail(kerr.InvalidRegularExpression.Code, "SubscribedTopicRegex `"+*req.SubscribedTopicRegex+"` is not a valid regular expression: "+err.Error()+".")
		}
	}
	g := c.groups[req.Group]
	if req.MemberEpoch == 0 {
		if req.RebalanceTimeoutMillis <= 0 && req.RebalanceTimeoutMillis != -1 || req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil {
			return fail(kerr.InvalidRequest.Code, "RebalanceTimeoutMs and SubscribedTopicNames must be set in the first heartbeat.")
		}
		if g == nil {
			g = newGroup(req.Group)
			c.groups[req.Group] = g
		}
		if g.kind == kindClassic {
			if len(g.members) > 0 || len(g.pending) > 0 {
				return fail(kerr.GroupIDNotFound.Code, "Group "+req.Group+" is not a consumer group.")
			}
			// An empty classic group (or one holding only offsets)
			// becomes a consumer group; its offsets stay.
			g.kind = kindConsumer
			g.state, g.protocolType, g.protocol, g.leader = stateEmpty, "consumer", "", ""
			g.consumerState = consumerState{assignor: assignorUniform}
		}
	} else {
		if g == nil || g.kind != kindConsumer {
			return fail(kerr.UnknownMemberID.Code, "")
		}
	}

	switch req.MemberEpoch {
	case -1, -2: // leave; -2 is a static member's temporary leave
		m := g.cmember(req.MemberID)
		if m == nil {
			return fail(kerr.UnknownMemberID.Code, "")
		}
		c.removeConsumerMember(g, m)
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.MemberID = kmsg.StringPtr(m.id)
		resp.MemberEpoch = req.MemberEpoch
		return resp
	case 0:
		return c.consumerJoin(r, g, req)
	}

	m := g.cmember(req.MemberID)
	if m == nil {
		return fail(kerr.UnknownMemberID.Code, "")
	}
	if req.MemberEpoch != m.epoch {
		// Kafka also accepts the previous epoch when the owned
		// partitions show the member missed a response; this broker
		// fences instead and the member rejoins.
		return fail(kerr.FencedMemberEpoch.Code, fmt.Sprintf("The member epoch %d does not match the expected epoch %d.", req.MemberEpoch, m.epoch))
	}
	m.sessionDeadline = c.now.Add(c.cfg.ConsumerSessionTimeout)
	if c.updateSubscription(g, m, req) {
		c.bumpGroupEpoch(g)
	}
	return c.reconcile(g, m, req)
}

func (c *Coordinator) consumerJoin(r Request, g *group, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	id := req.MemberID
	if id == "" {
		id = c.cfg.NewID() // v0: the coordinator names the member
	}
	m := g.cmember(id)
	if m != nil {
		// A member rejoining with epoch 0 (it was fenced or restarted)
		// starts over.
		c.removeConsumerMember(g, m)
	}
	if req.InstanceID != nil {
		for _, o := range g.cmembers {
			if o.instanceID != nil && *o.instanceID == *req.InstanceID {
				// A restarted static member takes over its
				// predecessor's assignment.
				c.removeConsumerMember(g, o)
			}
		}
	}
	m = &cmember{
		id:         id,
		instanceID: req.InstanceID,
		clientID:   r.ClientID,
		clientHost: r.ClientHost,
		assigned:   partitions{},
		revoking:   partitions{},
	}
	g.cmembers = append(g.cmembers, m)
	m.sessionDeadline = c.now.Add(c.cfg.ConsumerSessionTimeout)
	c.updateSubscription(g, m, req)
	c.bumpGroupEpoch(g)
	return c.reconcile(g, m, req)
}

// updateSubscription takes the fields a heartbeat may change; it reports
// whether the subscription changed.
func (c *Coordinator) updateSubscription(g *group, m *cmember, req *kmsg.ConsumerGroupHeartbeatRequest) bool {
	changed := false
	if req.RackID != nil {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeoutMillis > 0 {
		m.rebalanceTimeout = msDuration(req.RebalanceTimeoutMillis)
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != m.assignor {
		m.assignor = *req.ServerAssignor
		changed = true
	}
	if req.SubscribedTopicNames != nil {
		topics := slices.Clone(req.SubscribedTopicNames)
		sort.Strings(topics)
		topics = slices.Compact(topics)
		if !slices.Equal(topics, m.subscribed) {
			m.subscribed = topics
			changed = true
		}
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != m.regex {
		m.regex, m.re = *req.SubscribedTopicRegex, nil
		if m.regex != "" {
			m.re, _ = compileTopicRegex(m.regex) // validated by consumerHeartbeat
		}
		changed = true
	}
	return changed
}

// compileTopicRegex compiles a SubscribedTopicRegex. Kafka (RE2/J) matches
// it against whole topic names; Go's regexp is RE2 too.
func compileTopicRegex(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// TopicLister is implemented by a Topics that can list every topic, the
// internal ones included: KIP-848 regex subscriptions are resolved against
// it (without it, a regex matches nothing).
type TopicLister interface {
	TopicNames() []string
}

// topicNames lists the topics when a member of g subscribes by regex (nil
// otherwise, without asking the catalogue).
func (c *Coordinator) topicNames(g *group) []string {
	for _, m := range g.cmembers {
		if m.re != nil {
			if l, ok := c.cfg.Topics.(TopicLister); ok {
				return l.TopicNames()
			}
			return nil
		}
	}
	return nil
}

// memberTopics is what m subscribes to: its topic names and the topics of
// names its regex matches, sorted.
func (m *cmember) memberTopics(names []string) []string {
	if m.re == nil {
		return m.subscribed
	}
	topics := slices.Clone(m.subscribed)
	for _, t := range names {
		if m.re.MatchString(t) {
			topics = append(topics, t)
		}
	}
	sort.Strings(topics)
	return slices.Compact(topics)
}

// regexSubscribes reports whether a member's regex matches topic.
func (g *group) regexSubscribes(topic string) bool {
	for _, m := range g.cmembers {
		if m.re != nil && m.re.MatchString(topic) {
			return true
		}
	}
	return false
}

func (c *Coordinator) bumpGroupEpoch(g *group) {
	g.groupEpoch++
	c.computeTarget(g)
}

func (c *Coordinator) removeConsumerMember(g *group, m *cmember) {
	for i, o := range g.cmembers {
		if o == m {
			g.cmembers = append(g.cmembers[:i:i], g.cmembers[i+1:]...)
			break
		}
	}
	c.bumpGroupEpoch(g)
}

// subscriptionSig describes the partition counts of every subscribed
// topic: when it changes (a topic created or grown) the target changes.
func (c *Coordinator) subscriptionSig(g *group) string {
	var b strings.Builder
	for _, t := range g.subscribedTopicList(c.topicNames(g)) {
		n := int32(-1)
		if c.cfg.Topics != nil {
			if _, parts, ok := c.cfg.Topics.Partitions(t); ok {
				n = parts
			}
		}
		fmt.Fprintf(&b, "%s:%d,", t, n)
	}
	return b.String()
}

func (g *group) subscribedTopicList(names []string) []string {
	var all []string
	for _, m := range g.cmembers {
		all = append(all, m.memberTopics(names)...)
	}
	sort.Strings(all)
	return slices.Compact(all)
}

// computeTarget runs the assignor over the members and their
// subscriptions; the target assignment's epoch becomes the group epoch.
func (c *Coordinator) computeTarget(g *group) {
	g.assignor = assignorUniform
	for _, m := range g.cmembers {
		if m.assignor != "" {
			g.assignor = m.assignor // Kafka: the most used; members agree in practice
		}
	}
	g.subscriptionSig = c.subscriptionSig(g)
	subscribers := map[string][]*cmember{}
	names := c.topicNames(g)
	for _, m := range g.cmembers {
		for _, t := range m.memberTopics(names) {
			subscribers[t] = append(subscribers[t], m)
		}
	}
	next := map[*cmember]partitions{}
	for _, m := range g.cmembers {
		next[m] = partitions{}
	}
	count := map[*cmember]int{}
	for _, topic := range sortedKeys(subscribers) {
		if c.cfg.Topics == nil {
			break
		}
		id, n, ok := c.cfg.Topics.Partitions(topic)
		if !ok {
			continue
		}
		members := subscribers[topic]
		sort.Slice(members, func(i, j int) bool { return members[i].id < members[j].id })
		if g.assignor == assignorRange {
			// Contiguous ranges per topic; the first n%len members get
			// one more.
			per, extra := int(n)/len(members), int(n)%len(members)
			p := int32(0)
			for i, m := range members {
				take := per
				if i < extra {
					take++
				}
				for range take {
					next[m][id] = append(next[m][id], p)
					p++
				}
			}
			continue
		}
		// Uniform: a partition stays with its current target owner while
		// that owner is subscribed and not above its fair share; the rest
		// go to the least loaded subscriber.
		quota := (int(n) + len(members) - 1) / len(members)
		var free []int32
		for p := int32(0); p < n; p++ {
			kept := false
			for _, m := range members {
				if slices.Contains(m.target[id], p) && len(next[m][id]) < quota {
					next[m][id] = append(next[m][id], p)
					count[m]++
					kept = true
					break
				}
			}
			if !kept {
				free = append(free, p)
			}
		}
		for _, p := range free {
			best := members[0]
			for _, m := range members[1:] {
				if count[m] < count[best] || count[m] == count[best] && len(next[m][id]) < len(next[best][id]) {
					best = m
				}
			}
			next[best][id] = append(next[best][id], p)
			count[best]++
		}
	}
	for _, m := range g.cmembers {
		for id := range next[m] {
			slices.Sort(next[m][id])
		}
		m.target = next[m]
	}
	g.targetEpoch = g.groupEpoch
}

// ownedByOthers reports whether another member still holds tp.
func (g *group) ownedByOthers(m *cmember, id [16]byte, p int32) bool {
	for _, o := range g.cmembers {
		if o != m && (slices.Contains(o.assigned[id], p) || slices.Contains(o.revoking[id], p)) {
			return true
		}
	}
	return false
}

// reconcile moves m towards its target and answers its heartbeat.
func (c *Coordinator) reconcile(g *group, m *cmember, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	if sig := c.subscriptionSig(g); sig != g.subscriptionSig {
		c.bumpGroupEpoch(g) // a subscribed topic appeared or grew
	}
	if req.Topics != nil && len(m.revoking) > 0 {
		// The member lists what it owns: revocations it no longer lists
		// are done.
		owned := partitions{}
		for _, t := range req.Topics {
			owned[t.TopicID] = t.Partitions
		}
		for id, ps := range m.revoking {
			var still []int32
			for _, p := range ps {
				if slices.Contains(owned[id], p) {
					still = append(still, p)
				}
			}
			if len(still) == 0 {
				delete(m.revoking, id)
			} else {
				m.revoking[id] = still
			}
		}
	}
	if len(m.revoking) == 0 {
		m.rebalanceDeadline = time.Time{}
		// Revoke what the target no longer has.
		for id, ps := range m.assigned {
			var keep, drop []int32
			for _, p := range ps {
				if slices.Contains(m.target[id], p) {
					keep = append(keep, p)
				} else {
					drop = append(drop, p)
				}
			}
			if len(drop) > 0 {
				m.revoking[id] = drop
			}
			if len(keep) == 0 {
				delete(m.assigned, id)
			} else {
				m.assigned[id] = keep
			}
		}
		if len(m.revoking) > 0 {
			m.rebalanceDeadline = c.now.Add(m.rebalanceTimeout)
		} else {
			// Nothing to give up: the member is at the target epoch,
			// and takes every target partition no one else holds.
			m.epoch = g.targetEpoch
			for id, ps := range m.target {
				for _, p := range ps {
					if !slices.Contains(m.assigned[id], p) && !g.ownedByOthers(m, id, p) {
						m.assigned[id] = append(m.assigned[id], p)
					}
				}
				slices.Sort(m.assigned[id])
			}
		}
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.MemberID = kmsg.StringPtr(m.id)
	resp.MemberEpoch = m.epoch
	resp.HeartbeatIntervalMillis = ms(c.cfg.ConsumerHeartbeatInterval)
	sent := formatPartitions(m.assigned)
	if sent != m.lastSent || req.MemberEpoch == 0 || req.Topics != nil && !ownedMatches(req.Topics, m.assigned) {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, id := range sortedIDs(m.assigned) {
			a.Topics = append(a.Topics, kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{TopicID: id, Partitions: slices.Clone(m.assigned[id])})
		}
		resp.Assignment = &a
		m.lastSent = sent
	}
	return resp
}

func ownedMatches(owned []kmsg.ConsumerGroupHeartbeatRequestTopic, assigned partitions) bool {
	got := partitions{}
	for _, t := range owned {
		if len(t.Partitions) > 0 {
			got[t.TopicID] = slices.Sorted(slices.Values(t.Partitions))
		}
	}
	return samePartitions(got, assigned)
}

func samePartitions(a, b partitions) bool {
	return formatPartitions(a) == formatPartitions(b)
}

func sortedIDs(ps partitions) [][16]byte {
	ids := make([][16]byte, 0, len(ps))
	for id, p := range ps {
		if len(p) > 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}

func formatPartitions(ps partitions) string {
	var b strings.Builder
	for _, id := range sortedIDs(ps) {
		fmt.Fprintf(&b, "%x:%v;", id, ps[id])
	}
	return b.String()
}

func (c *Coordinator) tickConsumer(g *group) {
	for _, m := range slices.Clone(g.cmembers) {
		expired := !c.now.Before(m.sessionDeadline)
		slow := !m.rebalanceDeadline.IsZero() && !c.now.Before(m.rebalanceDeadline)
		if expired || slow {
			// A member that stopped heartbeating, or that did not give
			// up its partitions within the rebalance timeout, is fenced.
			c.removeConsumerMember(g, m)
		}
	}
}

func (c *Coordinator) consumerDescribe(req *kmsg.ConsumerGroupDescribeRequest) *kmsg.ConsumerGroupDescribeResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, name := range req.Groups {
		d := kmsg.NewConsumerGroupDescribeResponseGroup()
		d.Group = name
		if d.ErrorCode = c.checkCoordinator(name); d.ErrorCode != 0 {
			resp.Groups = append(resp.Groups, d)
			continue
		}
		g := c.groups[name]
		if g == nil || g.kind != kindConsumer {
			d.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + name + " not found."
			if g != nil {
				msg = "Group " + name + " is not a consumer group."
			}
			d.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, d)
			continue
		}
		d.State = g.consumerStateName()
		d.Epoch, d.AssignmentEpoch, d.AssignorName = g.groupEpoch, g.targetEpoch, g.assignor
		for _, m := range g.cmembers {
			dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			dm.MemberID, dm.InstanceID, dm.RackID, dm.MemberEpoch = m.id, m.instanceID, m.rackID, m.epoch
			dm.ClientID, dm.ClientHost = m.clientID, m.clientHost
			dm.SubscribedTopics = slices.Clone(m.subscribed)
			if m.regex != "" {
				dm.SubscribedTopicRegex = kmsg.StringPtr(m.regex)
			}
			dm.Assignment = c.describeAssignment(m.assigned)
			dm.TargetAssignment = c.describeAssignment(m.target)
			d.Members = append(d.Members, dm)
		}
		if req.IncludeAuthorizedOperations {
			d.AuthorizedOperations = groupOperations
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

func (c *Coordinator) describeAssignment(ps partitions) kmsg.Assignment {
	var a kmsg.Assignment
	for _, id := range sortedIDs(ps) {
		tp := kmsg.AssignmentTopicPartition{TopicID: id, Partitions: slices.Clone(ps[id])}
		if c.cfg.Topics != nil {
			tp.Topic, _, _ = c.cfg.Topics.TopicByID(id)
		}
		a.TopicPartitions = append(a.TopicPartitions, tp)
	}
	return a
}

// validateConsumerCommit is Kafka's ConsumerGroup.validateOffsetCommit.
func (g *group) validateConsumerCommit(req *kmsg.OffsetCommitRequest) int16 {
	if req.Generation < 0 && req.MemberID == "" && len(g.cmembers) == 0 {
		return 0 // an admin's commit to an empty group
	}
	m := g.cmember(req.MemberID)
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if req.Generation != m.epoch {
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// validateConsumerFetch checks a member's OffsetFetch (v9+); admins (no
// member ID, negative epoch) are not checked.
func (g *group) validateConsumerFetch(rg kmsg.OffsetFetchRequestGroup) int16 {
	if rg.MemberID == nil && rg.MemberEpoch < 0 {
		return 0
	}
	if rg.MemberID == nil {
		return kerr.UnknownMemberID.Code
	}
	m := g.cmember(*rg.MemberID)
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if rg.MemberEpoch != m.epoch {
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}
