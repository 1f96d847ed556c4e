package group

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp"
)

// --- OffsetCommit ---

func fillCommit(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, code int16) {
	resp.Topics = append(resp.Topics, errresp.For(req, code).(*kmsg.OffsetCommitResponse).Topics...)
}

// validateClassicCommit is Kafka's ClassicGroup.validateOffsetCommit.
func (g *group) validateClassicCommit(req *kmsg.OffsetCommitRequest) int16 {
	if req.Generation < 0 && g.state == stateEmpty {
		// A simple consumer or an admin: groupless commits are fine
		// while the group has no members.
		return 0
	}
	if req.Generation >= 0 || req.MemberID != "" || req.InstanceID != nil {
		if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
			return code
		}
		if req.Generation != g.generation {
			return kerr.IllegalGeneration.Code
		}
	} else if g.state != stateEmpty {
		return kerr.UnknownMemberID.Code
	}
	if g.state == stateCompletingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

func (c *Coordinator) offsetCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	if code := c.checkGroup(req.Group); code != 0 {
		fillCommit(req, resp, code)
		return resp
	}
	g := c.groups[req.Group]
	if g == nil {
		if req.Generation >= 0 {
			// Kafka: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION
			// before.
			code := kerr.IllegalGeneration.Code
			if req.Version >= 9 {
				code = kerr.GroupIDNotFound.Code
			}
			fillCommit(req, resp, code)
			return resp
		}
		// A simple consumer's group is created by its first commit.
		g = newGroup(req.Group)
		c.groups[req.Group] = g
	}
	var code int16
	if g.kind == kindConsumer {
		code = g.validateConsumerCommit(req)
	} else {
		code = g.validateClassicCommit(req)
	}
	if code != 0 {
		fillCommit(req, resp, code)
		return resp
	}
	if g.kind == kindClassic {
		if m := g.member(req.MemberID); m != nil && m.joinReply == nil && m.syncReply == nil {
			m.sessionDeadline = c.now.Add(m.sessionTimeout)
		}
	}
	for _, t := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = t.Topic, t.TopicID
		name, partitions, known := t.Topic, int32(-1), c.cfg.Topics == nil
		if c.cfg.Topics != nil {
			if req.Version >= 10 {
				name, partitions, known = c.cfg.Topics.TopicByID(t.TopicID)
			} else {
				_, partitions, known = c.cfg.Topics.Partitions(t.Topic)
			}
		}
		for _, p := range t.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			epoch := p.LeaderEpoch
			if req.Version < 6 {
				epoch = -1
			}
			o, code := c.commitOffset(known, partitions, p.Partition, p.Offset, epoch, p.Metadata)
			switch {
			case code == kerr.UnknownTopicOrPartition.Code && !known && req.Version >= 10:
				code = kerr.UnknownTopicID.Code
			case code == 0:
				tp := topicPartition{name, p.Partition}
				g.offsets[tp] = o
				c.persist(c.offsetRecord(g.name, tp, &o))
			}
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// commitOffset checks one partition of an OffsetCommit or a
// TxnOffsetCommit against the catalogue (known: the topic exists;
// partitions: its count, -1 without a catalogue) and
// offset.metadata.max.bytes, and returns the offset to keep (leaderEpoch
// -1 from a version that carries none), or the partition's error code.
func (c *Coordinator) commitOffset(known bool, partitions, partition int32, offset int64, leaderEpoch int32, metadata *string) (committedOffset, int16) {
	switch {
	case !known || partitions >= 0 && (partition < 0 || partition >= partitions):
		return committedOffset{}, kerr.UnknownTopicOrPartition.Code
	case metadata != nil && len(*metadata) > c.cfg.OffsetMetadataMaxSize:
		return committedOffset{}, kerr.OffsetMetadataTooLarge.Code
	}
	o := committedOffset{offset: offset, leaderEpoch: leaderEpoch, commitTimestamp: c.now.UnixMilli()}
	if metadata != nil {
		o.metadata = *metadata
	}
	return o, 0
}

// --- OffsetFetch ---

func (c *Coordinator) offsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	groups := req.Groups
	if req.Version <= 7 {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = req.Group
		if req.Topics != nil {
			rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
			for _, t := range req.Topics {
				rg.Topics = append(rg.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		groups = []kmsg.OffsetFetchRequestGroup{rg}
	}
	for _, rg := range groups {
		resp.Groups = append(resp.Groups, c.fetchGroup(req, rg))
	}
	if req.Version <= 7 {
		g0 := resp.Groups[0]
		resp.Groups = nil
		if req.Version >= 2 {
			resp.ErrorCode = g0.ErrorCode
		}
		for _, t := range g0.Topics {
			st := kmsg.NewOffsetFetchResponseTopic()
			st.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewOffsetFetchResponseTopicPartition()
				sp.Partition, sp.Offset, sp.LeaderEpoch, sp.Metadata, sp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				if req.Version < 2 && g0.ErrorCode != 0 {
					sp.ErrorCode = g0.ErrorCode
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		if req.Version < 2 && g0.ErrorCode != 0 && len(resp.Topics) == 0 {
			// v0-1 have nowhere to put a group error but the partitions.
			resp.Topics = errresp.OffsetFetchTopics(req.Topics, g0.ErrorCode)
		}
	}
	return resp
}

func (c *Coordinator) fetchGroup(req *kmsg.OffsetFetchRequest, rg kmsg.OffsetFetchRequestGroup) kmsg.OffsetFetchResponseGroup {
	sg := kmsg.NewOffsetFetchResponseGroup()
	sg.Group = rg.Group
	if code := c.checkCoordinator(rg.Group); code != 0 {
		sg.ErrorCode = code
		return sg
	}
	g := c.groups[rg.Group]
	if g != nil && g.kind == kindConsumer {
		if code := g.validateConsumerFetch(rg); code != 0 {
			sg.ErrorCode = code
			return sg
		}
	}
	partition := func(tp topicPartition) kmsg.OffsetFetchResponseGroupTopicPartition {
		sp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		sp.Partition, sp.Offset, sp.LeaderEpoch = tp.partition, -1, -1
		if g != nil {
			if o, ok := g.offsets[tp]; ok {
				sp.Offset, sp.LeaderEpoch = o.offset, o.leaderEpoch
				md := o.metadata
				sp.Metadata = &md
			}
		}
		if sp.Metadata == nil {
			empty := ""
			sp.Metadata = &empty
		}
		if req.RequireStable && g.hasPending(tp) {
			// KIP-447: the offset may move when a transaction ends.
			sp.Offset, sp.LeaderEpoch, sp.ErrorCode = -1, -1, kerr.UnstableOffsetCommit.Code
		}
		return sp
	}
	if rg.Topics == nil {
		// Every committed offset. A group that does not exist has none,
		// and that is no error (Kafka; sarama's offset manager relies
		// on it).
		if g == nil {
			return sg
		}
		byTopic := map[string][]kmsg.OffsetFetchResponseGroupTopicPartition{}
		for _, tp := range g.sortedOffsets() {
			byTopic[tp.topic] = append(byTopic[tp.topic], partition(tp))
		}
		for _, name := range sortedKeys(byTopic) {
			st := kmsg.NewOffsetFetchResponseGroupTopic()
			st.Topic = name
			if req.Version >= 10 && c.cfg.Topics != nil {
				st.TopicID, _, _ = c.cfg.Topics.Partitions(name)
			}
			st.Partitions = byTopic[name]
			sg.Topics = append(sg.Topics, st)
		}
		return sg
	}
	for _, t := range rg.Topics {
		st := kmsg.NewOffsetFetchResponseGroupTopic()
		st.Topic, st.TopicID = t.Topic, t.TopicID
		name := t.Topic
		if req.Version >= 10 && c.cfg.Topics != nil {
			name, _, _ = c.cfg.Topics.TopicByID(t.TopicID)
		}
		for _, p := range t.Partitions {
			st.Partitions = append(st.Partitions, partition(topicPartition{name, p}))
		}
		sg.Topics = append(sg.Topics, st)
	}
	return sg
}

func (g *group) sortedOffsets() []topicPartition {
	tps := make([]topicPartition, 0, len(g.offsets))
	for tp := range g.offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
	return tps
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// --- OffsetDelete ---

func (c *Coordinator) offsetDelete(req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if resp.ErrorCode = c.checkGroup(req.Group); resp.ErrorCode != 0 {
		return resp
	}
	g := c.groups[req.Group]
	if g == nil {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return resp
	}
	// An empty group loses whatever is asked; a consumer group with
	// members keeps the offsets of the topics it subscribes to; any other
	// group with members keeps everything.
	var subscribed map[string]bool
	if !g.empty() {
		if g.kind == kindClassic && g.protocolType != "consumer" {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp
		}
		subscribed = g.subscribedTopics()
	}
	for _, t := range req.Topics {
		st := kmsg.NewOffsetDeleteResponseTopic()
		st.Topic = t.Topic
		_, partitions, known := int32(0), int32(-1), c.cfg.Topics == nil
		if c.cfg.Topics != nil {
			_, partitions, known = c.cfg.Topics.Partitions(t.Topic)
		}
		for _, p := range t.Partitions {
			sp := kmsg.NewOffsetDeleteResponseTopicPartition()
			sp.Partition = p.Partition
			switch {
			case !known || partitions >= 0 && (p.Partition < 0 || p.Partition >= partitions):
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case subscribed[t.Topic] || subscribed != nil && g.regexSubscribes(t.Topic):
				sp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			default:
				tp := topicPartition{t.Topic, p.Partition}
				if _, ok := g.offsets[tp]; ok {
					delete(g.offsets, tp)
					c.persist(c.offsetRecord(g.name, tp, nil))
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// subscribedTopics is the set of topics the members subscribe to: from the
// ConsumerMemberMetadata of the selected protocol (classic), or the
// members' subscriptions (KIP-848).
func (g *group) subscribedTopics() map[string]bool {
	topics := map[string]bool{}
	if g.kind == kindConsumer {
		for _, m := range g.cmembers {
			for _, t := range m.subscribed {
				topics[t] = true
			}
		}
		return topics
	}
	for _, m := range g.members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.metadata(g.protocol)); err != nil {
			continue
		}
		for _, t := range md.Topics {
			topics[t] = true
		}
	}
	return topics
}
