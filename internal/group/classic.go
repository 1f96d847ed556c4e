package group

import (
	"bytes"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp"
)

// groupKind is the protocol a group speaks: the classic JoinGroup/SyncGroup
// protocol or KIP-848's ConsumerGroupHeartbeat.
type groupKind int8

const (
	kindClassic groupKind = iota
	kindConsumer
)

func (k groupKind) String() string {
	if k == kindConsumer {
		return "consumer"
	}
	return "classic"
}

// groupState is a classic group's state, Kafka's names.
type groupState int8

const (
	stateEmpty groupState = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}[s]
}

// waiter is a request whose response is deferred.
type waiter struct {
	id      uint64
	version int16
}

// member is a classic group member.
type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocols        []kmsg.JoinGroupRequestProtocol
	assignment       []byte

	joinReply *waiter // a JoinGroup waiting for the join phase to end
	syncReply *waiter // a SyncGroup waiting for the leader's assignment

	sessionDeadline time.Time
}

type topicPartition struct {
	topic     string
	partition int32
}

type committedOffset struct {
	offset          int64
	leaderEpoch     int32
	metadata        string
	commitTimestamp int64
}

// group is one group: classic state, KIP-848 state, committed offsets.
type group struct {
	name string
	kind groupKind

	// Classic protocol.
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      []*member            // in join order
	pending      map[string]time.Time // member IDs handed out by MEMBER_ID_REQUIRED -> expiry
	static       map[string]string    // group.instance.id -> member ID
	awaitingSync map[string]bool      // members sent a JoinGroup response, not yet synced

	joinDeadline  time.Time // PreparingRebalance ends (rebalance timeout)
	delayDeadline time.Time // group.initial.rebalance.delay of an empty group
	syncDeadline  time.Time // members in awaitingSync are removed

	offsets map[topicPartition]committedOffset
	// pendingTxns are the transactional offsets not yet committed, per
	// producer id (txn.go).
	pendingTxns map[int64]pendingTxn

	// KIP-848 (consumer.go).
	consumerState
}

func newGroup(name string) *group {
	return &group{
		name:    name,
		pending: make(map[string]time.Time),
		static:  make(map[string]string),
		offsets: make(map[topicPartition]committedOffset),
	}
}

func (g *group) member(id string) *member {
	for _, m := range g.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// empty reports whether the group has no members of either protocol.
func (g *group) empty() bool {
	if g.kind == kindConsumer {
		return len(g.cmembers) == 0
	}
	return len(g.members) == 0
}

// stateName is the state ListGroups and DescribeGroups report.
func (g *group) stateName() string {
	if g.kind == kindConsumer {
		return g.consumerStateName()
	}
	return g.state.String()
}

// supportsProtocols is Kafka's ClassicGroup.supportsProtocols: an empty
// group takes any non-empty protocol type and list; otherwise the type must
// match and one protocol must be supported by every member.
func (g *group) supportsProtocols(protocolType string, protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.supportCount(p.Name) == len(g.members) {
			return true
		}
	}
	return false
}

func (g *group) supportCount(protocol string) int {
	n := 0
	for _, m := range g.members {
		for _, p := range m.protocols {
			if p.Name == protocol {
				n++
				break
			}
		}
	}
	return n
}

// selectProtocol is Kafka's vote: the candidates are the protocols every
// member supports; each member votes for the first candidate in its own
// preference order; most votes wins. Kafka breaks ties arbitrarily; here
// the leader's (first member's) preference breaks them, so traces are
// deterministic.
func (g *group) selectProtocol() string {
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.supportCount(p.Name) == len(g.members) {
				votes[p.Name]++
				break
			}
		}
	}
	best, bestVotes := "", 0
	order := g.members[0].protocols
	if l := g.member(g.leader); l != nil {
		order = l.protocols
	}
	for _, p := range order {
		if v := votes[p.Name]; v > bestVotes {
			best, bestVotes = p.Name, v
		}
	}
	return best
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func sameProtocols(a, b []kmsg.JoinGroupRequestProtocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Metadata, b[i].Metadata) {
			return false
		}
	}
	return true
}

// validateMember is Kafka's ClassicGroup.validateMember.
func (g *group) validateMember(memberID string, instanceID *string) int16 {
	if instanceID != nil {
		known, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if known != memberID {
			return kerr.FencedInstanceID.Code
		}
		return 0
	}
	if g.member(memberID) == nil {
		return kerr.UnknownMemberID.Code
	}
	return 0
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

func ms(d time.Duration) int32 { return int32(d / time.Millisecond) }

func msDuration(v int32) time.Duration { return time.Duration(v) * time.Millisecond }

// --- JoinGroup ---

func joinError(req *kmsg.JoinGroupRequest, code int16) *kmsg.JoinGroupResponse {
	return errresp.For(req, code).(*kmsg.JoinGroupResponse)
}

func (c *Coordinator) join(r Request, req *kmsg.JoinGroupRequest) {
	fail := func(code int16) { c.respond(r.ID, joinError(req, code)) }
	if code := c.checkGroup(req.Group); code != 0 {
		fail(code)
		return
	}
	session := msDuration(req.SessionTimeoutMillis)
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		fail(kerr.InvalidSessionTimeout.Code)
		return
	}
	g := c.groups[req.Group]
	created := false
	if g == nil {
		if req.MemberID != "" {
			fail(kerr.UnknownMemberID.Code)
			return
		}
		g = newGroup(req.Group)
		c.groups[req.Group] = g
		created = true
	}
	if g.kind == kindConsumer {
		if len(g.cmembers) > 0 {
			fail(kerr.InconsistentGroupProtocol.Code)
			return
		}
		// An empty KIP-848 group turns classic (Kafka's
		// group.consumer.migration.policy, bidirectional by default).
		g.kind = kindClassic
		g.consumerState = consumerState{}
	}
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		if created {
			delete(c.groups, req.Group)
		}
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	if req.MemberID == "" {
		c.joinNewMember(r, g, req)
	} else {
		c.joinExistingMember(r, g, req)
	}
}

func (c *Coordinator) joinNewMember(r Request, g *group, req *kmsg.JoinGroupRequest) {
	id := c.newMemberID(r.ClientID, req.InstanceID)
	if req.InstanceID != nil {
		if old, ok := g.static[*req.InstanceID]; ok {
			c.replaceStaticMember(r, g, req, old, id)
			return
		}
		// Static members join at once: KIP-394's round trip is for
		// dynamic members only.
		c.addMember(r, g, req, id)
		return
	}
	if req.Version >= 4 {
		// KIP-394: hand out the member ID and make the client come back
		// with it, so a client that times out cannot leave ghosts.
		g.pending[id] = c.now.Add(msDuration(req.SessionTimeoutMillis))
		resp := joinError(req, kerr.MemberIDRequired.Code)
		resp.MemberID = id
		c.respond(r.ID, resp)
		return
	}
	c.addMember(r, g, req, id)
}

func (c *Coordinator) joinExistingMember(r Request, g *group, req *kmsg.JoinGroupRequest) {
	if _, ok := g.pending[req.MemberID]; ok {
		c.addMember(r, g, req, req.MemberID)
		return
	}
	if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
		c.respond(r.ID, joinError(req, code))
		return
	}
	m := g.member(req.MemberID)
	switch g.state {
	case statePreparingRebalance:
		c.updateMember(r, g, m, req)
		c.maybeCompleteJoin(g)
	case stateCompletingRebalance:
		if sameProtocols(m.protocols, req.Protocols) {
			// A retried JoinGroup: the join phase already ended.
			c.respond(r.ID, c.joinResponse(g, m, req))
			return
		}
		c.updateMember(r, g, m, req)
		c.rebalance(g)
	case stateStable:
		if m.id != g.leader && sameProtocols(m.protocols, req.Protocols) {
			c.respond(r.ID, c.joinResponse(g, m, req))
			return
		}
		// The leader rejoins to trigger a rebalance (new topics, new
		// partitions); anyone with new metadata does too.
		c.updateMember(r, g, m, req)
		c.rebalance(g)
	default:
		c.respond(r.ID, joinError(req, kerr.UnknownMemberID.Code))
	}
}

// addMember adds a member whose JoinGroup waits for the join phase.
func (c *Coordinator) addMember(r Request, g *group, req *kmsg.JoinGroupRequest, id string) {
	delete(g.pending, id)
	m := &member{id: id, instanceID: req.InstanceID}
	g.members = append(g.members, m)
	if g.leader == "" {
		g.leader = id
	}
	if req.InstanceID != nil {
		g.static[*req.InstanceID] = id
	}
	if g.protocolType == "" || len(g.members) == 1 {
		g.protocolType = req.ProtocolType
	}
	c.updateMember(r, g, m, req)
	if !g.delayDeadline.IsZero() {
		// A new member during the initial delay extends it, up to the
		// rebalance timeout.
		g.delayDeadline = minTime(c.now.Add(c.cfg.InitialRebalanceDelay), g.joinDeadline)
	}
	c.rebalance(g)
}

// updateMember takes a member's new JoinGroup: it now waits for the join
// phase to end.
func (c *Coordinator) updateMember(r Request, g *group, m *member, req *kmsg.JoinGroupRequest) {
	m.clientID, m.clientHost = r.ClientID, r.ClientHost
	m.sessionTimeout = msDuration(req.SessionTimeoutMillis)
	m.rebalanceTimeout = msDuration(req.RebalanceTimeoutMillis)
	if req.Version == 0 {
		m.rebalanceTimeout = m.sessionTimeout
	}
	m.protocols = req.Protocols
	if m.joinReply != nil {
		// The client gave up on its earlier JoinGroup and sent another.
		old := &kmsg.JoinGroupRequest{Version: m.joinReply.version, MemberID: m.id}
		c.respond(m.joinReply.id, joinError(old, kerr.RebalanceInProgress.Code))
	}
	m.joinReply = &waiter{r.ID, req.Version}
}

// rebalance starts a rebalance unless one is under way, then completes
// the join phase if everyone is in.
func (c *Coordinator) rebalance(g *group) {
	if g.state != statePreparingRebalance {
		c.prepareRebalance(g)
	}
	c.maybeCompleteJoin(g)
}

func (c *Coordinator) prepareRebalance(g *group) {
	if g.state == stateCompletingRebalance {
		// The leader's assignment would be for the old membership.
		for _, m := range g.members {
			m.assignment = nil
			if m.syncReply != nil {
				c.respondSyncError(m.syncReply, kerr.RebalanceInProgress.Code)
				m.syncReply = nil
			}
		}
	}
	g.awaitingSync = nil
	g.syncDeadline = time.Time{}
	g.joinDeadline = c.now.Add(g.maxRebalanceTimeout())
	if g.state == stateEmpty && c.cfg.InitialRebalanceDelay > 0 {
		g.delayDeadline = minTime(c.now.Add(c.cfg.InitialRebalanceDelay), g.joinDeadline)
	}
	g.state = statePreparingRebalance
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// allJoined is Kafka's hasAllMembersJoined: every member has a JoinGroup
// in, and no MEMBER_ID_REQUIRED member is still expected.
func (g *group) allJoined() bool {
	for _, m := range g.members {
		if m.joinReply == nil {
			return false
		}
	}
	return len(g.pending) == 0
}

func (c *Coordinator) maybeCompleteJoin(g *group) {
	if g.state != statePreparingRebalance || !g.delayDeadline.IsZero() && c.now.Before(g.delayDeadline) {
		return
	}
	if g.allJoined() {
		c.completeJoin(g)
	}
}

// completeJoin ends the join phase: members that did not rejoin are
// removed, the generation advances, the protocol is chosen, and everyone
// waiting gets a JoinGroup response (the leader with the members'
// metadata).
func (c *Coordinator) completeJoin(g *group) {
	g.joinDeadline, g.delayDeadline = time.Time{}, time.Time{}
	for _, m := range append([]*member(nil), g.members...) {
		if m.joinReply == nil {
			c.removeMember(g, m)
		}
	}
	if g.member(g.leader) == nil {
		g.leader = ""
		if len(g.members) > 0 {
			g.leader = g.members[0].id
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state = stateEmpty
		g.protocol = ""
		c.persistGroup(g)
		return
	}
	g.protocol = g.selectProtocol()
	g.state = stateCompletingRebalance
	g.awaitingSync = make(map[string]bool, len(g.members))
	g.syncDeadline = c.now.Add(g.maxRebalanceTimeout())
	for _, m := range g.members {
		g.awaitingSync[m.id] = true
		w := m.joinReply
		m.joinReply = nil
		m.sessionDeadline = c.now.Add(m.sessionTimeout)
		c.respond(w.id, c.joinResponse(g, m, &kmsg.JoinGroupRequest{Version: w.version}))
	}
}

// joinResponse is a successful JoinGroup response for m.
func (c *Coordinator) joinResponse(g *group, m *member, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	if m.id == g.leader {
		for _, o := range g.members {
			resp.Members = append(resp.Members, kmsg.JoinGroupResponseMember{
				MemberID:         o.id,
				InstanceID:       o.instanceID,
				ProtocolMetadata: o.metadata(g.protocol),
			})
		}
	}
	return resp
}

// replaceStaticMember is KIP-345's rejoin of a known group.instance.id
// with no member ID (a restarted static member): it gets a new member ID,
// the old one is fenced, and a stable group with unchanged protocols does
// not rebalance.
func (c *Coordinator) replaceStaticMember(r Request, g *group, req *kmsg.JoinGroupRequest, oldID, newID string) {
	m := g.member(oldID)
	if m.joinReply != nil {
		old := &kmsg.JoinGroupRequest{Version: m.joinReply.version, MemberID: oldID}
		c.respond(m.joinReply.id, joinError(old, kerr.FencedInstanceID.Code))
		m.joinReply = nil
	}
	if m.syncReply != nil {
		c.respondSyncError(m.syncReply, kerr.FencedInstanceID.Code)
		m.syncReply = nil
	}
	m.id = newID
	g.static[*req.InstanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if g.awaitingSync[oldID] {
		delete(g.awaitingSync, oldID)
		g.awaitingSync[newID] = true
	}
	switch g.state {
	case stateStable:
		if newID == g.leader && req.Version < 9 {
			// The leader cannot be told to skip the assignment before
			// KIP-814 (JoinGroup v9): rebalance.
			c.updateMember(r, g, m, req)
			c.rebalance(g)
			return
		}
		oldProtocols := m.protocols
		m.protocols = req.Protocols
		if g.selectProtocol() != g.protocol {
			m.protocols = oldProtocols
			c.updateMember(r, g, m, req)
			c.rebalance(g)
			return
		}
		m.clientID, m.clientHost = r.ClientID, r.ClientHost
		m.sessionTimeout = msDuration(req.SessionTimeoutMillis)
		m.rebalanceTimeout = msDuration(req.RebalanceTimeoutMillis)
		m.sessionDeadline = c.now.Add(m.sessionTimeout)
		c.persistGroup(g)
		resp := c.joinResponse(g, m, req)
		resp.SkipAssignment = newID == g.leader
		c.respond(r.ID, resp)
	case stateCompletingRebalance:
		// The leader may be assigning to the old member ID: rebalance.
		c.updateMember(r, g, m, req)
		c.rebalance(g)
	default: // PreparingRebalance
		c.updateMember(r, g, m, req)
		c.maybeCompleteJoin(g)
	}
}

// removeMember drops m, answering its waiting requests with
// UNKNOWN_MEMBER_ID. It does not start a rebalance.
func (c *Coordinator) removeMember(g *group, m *member) {
	if m.joinReply != nil {
		old := &kmsg.JoinGroupRequest{Version: m.joinReply.version, MemberID: m.id}
		c.respond(m.joinReply.id, joinError(old, kerr.UnknownMemberID.Code))
	}
	if m.syncReply != nil {
		c.respondSyncError(m.syncReply, kerr.UnknownMemberID.Code)
	}
	for i, o := range g.members {
		if o == m {
			g.members = append(g.members[:i:i], g.members[i+1:]...)
			break
		}
	}
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	delete(g.awaitingSync, m.id)
	if g.leader == m.id {
		g.leader = ""
	}
}

// memberLeft removes m and moves the group on: a stable or completing
// group rebalances, a preparing one may now be complete.
func (c *Coordinator) memberLeft(g *group, m *member) {
	c.removeMember(g, m)
	switch g.state {
	case stateStable, stateCompletingRebalance:
		c.rebalance(g)
	case statePreparingRebalance:
		c.maybeCompleteJoin(g)
	}
}

// classicGroup is the classic group a member's request names, or the
// request's error: checkGroup's, UNKNOWN_MEMBER_ID for a group that does
// not exist or is not classic.
func (c *Coordinator) classicGroup(name string) (*group, int16) {
	if code := c.checkGroup(name); code != 0 {
		return nil, code
	}
	g := c.groups[name]
	if g == nil || g.kind != kindClassic {
		return nil, kerr.UnknownMemberID.Code
	}
	return g, 0
}

// classicMember is classicGroup for a request of a member of the group's
// generation (SyncGroup, Heartbeat): also validateMember's error, or
// ILLEGAL_GENERATION.
func (c *Coordinator) classicMember(name, memberID string, instanceID *string, generation int32) (*group, int16) {
	g, code := c.classicGroup(name)
	if code == 0 {
		code = g.validateMember(memberID, instanceID)
	}
	if code == 0 && generation != g.generation {
		code = kerr.IllegalGeneration.Code
	}
	return g, code
}

// --- SyncGroup ---

func (c *Coordinator) respondSyncError(w *waiter, code int16) {
	req := &kmsg.SyncGroupRequest{Version: w.version}
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ErrorCode = code
	c.respond(w.id, resp)
}

func (c *Coordinator) sync(r Request, req *kmsg.SyncGroupRequest) {
	fail := func(code int16) {
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		c.respond(r.ID, resp)
	}
	g, code := c.classicMember(req.Group, req.MemberID, req.InstanceID, req.Generation)
	if code != 0 {
		fail(code)
		return
	}
	if req.ProtocolType != nil && *req.ProtocolType != g.protocolType ||
		req.Protocol != nil && *req.Protocol != g.protocol {
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	m := g.member(req.MemberID)
	switch g.state {
	case statePreparingRebalance:
		fail(kerr.RebalanceInProgress.Code)
	case stateCompletingRebalance:
		delete(g.awaitingSync, m.id)
		if m.syncReply != nil {
			c.respondSyncError(m.syncReply, kerr.RebalanceInProgress.Code)
		}
		m.syncReply = &waiter{r.ID, req.Version}
		if m.id != g.leader {
			return // followers wait for the leader's assignment
		}
		for _, o := range g.members {
			o.assignment = []byte{}
		}
		for _, a := range req.GroupAssignment {
			if o := g.member(a.MemberID); o != nil {
				o.assignment = a.MemberAssignment
			}
		}
		// The assignment is persisted with the group before anyone
		// hears of it (the Ready contract).
		g.state = stateStable
		c.persistGroup(g)
		for _, o := range g.members {
			if o.syncReply != nil {
				c.respondSync(g, o)
			}
		}
		if len(g.awaitingSync) == 0 {
			g.syncDeadline = time.Time{}
		}
	case stateStable:
		delete(g.awaitingSync, m.id)
		if len(g.awaitingSync) == 0 {
			g.syncDeadline = time.Time{}
		}
		m.syncReply = &waiter{r.ID, req.Version}
		c.respondSync(g, m)
	default:
		fail(kerr.UnknownMemberID.Code)
	}
}

func (c *Coordinator) respondSync(g *group, m *member) {
	req := &kmsg.SyncGroupRequest{Version: m.syncReply.version}
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.MemberAssignment = m.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	c.respond(m.syncReply.id, resp)
	m.syncReply = nil
	m.sessionDeadline = c.now.Add(m.sessionTimeout)
}

// --- Heartbeat ---

func (c *Coordinator) heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	g, code := c.classicMember(req.Group, req.MemberID, req.InstanceID, req.Generation)
	if resp.ErrorCode = code; code != 0 {
		return resp
	}
	m := g.member(req.MemberID)
	switch g.state {
	case statePreparingRebalance:
		m.sessionDeadline = c.now.Add(m.sessionTimeout)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	case stateCompletingRebalance, stateStable:
		m.sessionDeadline = c.now.Add(m.sessionTimeout)
	default:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	}
	return resp
}

// --- LeaveGroup ---

func (c *Coordinator) leave(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	members := req.Members
	if req.Version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	g, code := c.classicGroup(req.Group)
	if resp.ErrorCode = code; code != 0 {
		return resp
	}
	var left bool
	for _, rm := range members {
		code := int16(0)
		id := rm.MemberID
		if rm.InstanceID != nil {
			known, ok := g.static[*rm.InstanceID]
			switch {
			case !ok:
				code = kerr.UnknownMemberID.Code
			case id != "" && id != known:
				code = kerr.FencedInstanceID.Code
			default:
				id = known
			}
		}
		if code == 0 {
			if m := g.member(id); m != nil {
				c.removeMember(g, m)
				left = true
			} else if _, ok := g.pending[id]; ok {
				delete(g.pending, id)
				left = true
			} else {
				code = kerr.UnknownMemberID.Code
			}
		}
		if req.Version < 3 {
			resp.ErrorCode = code
			continue
		}
		resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: id, InstanceID: rm.InstanceID, ErrorCode: code})
	}
	if left {
		switch g.state {
		case stateStable, stateCompletingRebalance:
			c.rebalance(g)
		case statePreparingRebalance:
			c.maybeCompleteJoin(g)
		}
	}
	return resp
}

// --- time ---

func (c *Coordinator) tickClassic(g *group) {
	now := c.now
	for id, expiry := range g.pending {
		if !now.Before(expiry) {
			delete(g.pending, id)
			c.maybeCompleteJoin(g)
		}
	}
	for _, m := range append([]*member(nil), g.members...) {
		// A member waiting for a JoinGroup or SyncGroup response is kept
		// alive; the rebalance and sync deadlines bound that wait.
		if m.joinReply == nil && m.syncReply == nil && !now.Before(m.sessionDeadline) {
			c.memberLeft(g, m)
		}
	}
	if g.state == statePreparingRebalance {
		if !g.delayDeadline.IsZero() && !now.Before(g.delayDeadline) {
			g.delayDeadline = time.Time{}
			c.maybeCompleteJoin(g)
		}
		if g.state == statePreparingRebalance && !g.joinDeadline.IsZero() && !now.Before(g.joinDeadline) {
			c.completeJoin(g)
		}
	}
	if !g.syncDeadline.IsZero() && !now.Before(g.syncDeadline) {
		g.syncDeadline = time.Time{}
		if g.state == stateCompletingRebalance || g.state == stateStable {
			// Members that never sent SyncGroup after their JoinGroup
			// response are gone; the rest rebalance without them.
			var gone []*member
			for _, m := range g.members {
				if g.awaitingSync[m.id] {
					gone = append(gone, m)
				}
			}
			if len(gone) > 0 {
				for _, m := range gone {
					c.removeMember(g, m)
				}
				c.rebalance(g)
			}
		}
	}
}
