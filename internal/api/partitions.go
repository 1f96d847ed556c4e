package api

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// smallRequest is the count of topic entries, and of partition entries, up
// to which requestPartitions finds repeats by a scan instead of a map: most
// requests name a few partitions, and the scan allocates nothing.
const smallRequest = 16

// topicKey is how a request names a topic: by ID (Fetch v13+, Produce
// v13+) or by name.
type topicKey struct {
	name string
	id   [16]byte
}

// requestPartitions finds the entries of a request that name a partition an
// earlier entry named (Fetch, Produce, ListOffsets, OffsetForLeaderEpoch
// repeated millions of times must cost one answer, not millions). Feed it
// the request's entries in order: topic for each topic entry, then
// partition for each of its partition entries. Its memory grows with the
// distinct partitions, not with the entries.
type requestPartitions struct {
	// A partition is keyed by (the index of the first topic entry naming
	// its topic, the partition number) packed in 8 bytes.
	topicEntries int32
	smallTopics  [smallRequest]topicKey
	smallParts   [smallRequest]uint64
	smallFirsts  [smallRequest]int32
	nSmallParts  int
	topics       map[topicKey]int32 // once more than smallRequest topic entries
	parts        map[uint64]int32   // once more than smallRequest partitions

	// partitionsHint, if set, is the request's partition entries: the map
	// is made once at its size (capped: entries may all be repeats).
	partitionsHint int
}

// topic starts the next topic entry and returns the index of the first
// entry that named the same topic.
func (r *requestPartitions) topic(tk topicKey) int32 {
	i := r.topicEntries
	r.topicEntries++
	if r.topics == nil && i < smallRequest {
		// Every entry is kept, repeats too: the map built from them
		// below must not see unset slots.
		r.smallTopics[i] = tk
		for j := range i {
			if r.smallTopics[j] == tk {
				return j
			}
		}
		return i
	}
	if r.topics == nil {
		r.topics = make(map[topicKey]int32, 2*smallRequest)
		for j, t := range r.smallTopics {
			if _, ok := r.topics[t]; !ok {
				r.topics[t] = int32(j)
			}
		}
	}
	if first, ok := r.topics[tk]; ok {
		return first
	}
	r.topics[tk] = i
	return i
}

// partition records that entry (the caller's number for it, e.g. its
// position among the distinct partitions) names partition of the topic
// whose first entry is topic. If an earlier entry named the same partition
// it returns that entry's number and true, and records nothing.
func (r *requestPartitions) partition(topic, partition, entry int32) (first int32, repeated bool) {
	key := uint64(uint32(topic))<<32 | uint64(uint32(partition))
	if r.parts == nil {
		for i := range r.nSmallParts {
			if r.smallParts[i] == key {
				return r.smallFirsts[i], true
			}
		}
		if r.nSmallParts < smallRequest {
			r.smallParts[r.nSmallParts], r.smallFirsts[r.nSmallParts] = key, entry
			r.nSmallParts++
			return entry, false
		}
		r.parts = make(map[uint64]int32, min(max(r.partitionsHint, 2*smallRequest), 4096))
		for i := range r.nSmallParts {
			r.parts[r.smallParts[i]] = r.smallFirsts[i]
		}
	}
	if first, ok := r.parts[key]; ok {
		return first, true
	}
	r.parts[key] = entry
	return entry, false
}

// repeatedPartitions walks a request's topic entries (topic gives an
// entry's topic and partition count, partition its i-th partition) and
// returns the distinct partitions named more than once, numbered in the
// order first named: the numbering a second walk with a fresh
// requestPartitions gives them (nil when there is none, the usual case: no
// allocation), and the count of distinct partitions.
func repeatedPartitions[T any](topics []T, topic func(*T) (topicKey, int), partition func(*T, int) int32) (map[int32]bool, int) {
	var (
		entries  requestPartitions
		repeated map[int32]bool
		distinct int32
	)
	for i := range topics {
		_, n := topic(&topics[i])
		entries.partitionsHint += n
	}
	for i := range topics {
		tk, n := topic(&topics[i])
		ti := entries.topic(tk)
		for j := range n {
			if first, again := entries.partition(ti, partition(&topics[i], j), distinct); again {
				if repeated == nil {
					repeated = map[int32]bool{}
				}
				repeated[first] = true
			} else {
				distinct++
			}
		}
	}
	return repeated, int(distinct)
}

// resourceKey is a config resource (DescribeConfigs, AlterConfigs,
// IncrementalAlterConfigs) as a "topic" of requestPartitions: its name,
// with its type.
func resourceKey(resourceType int8, name string) topicKey {
	return topicKey{name: name, id: [16]byte{byte(resourceType)}}
}

// repeatedResources is repeatedPartitions for a list of config resources
// (each one "partition" 0 of its resourceKey).
func repeatedResources[T any](resources []T, key func(*T) (resourceType int8, name string)) (map[int32]bool, int) {
	return repeatedPartitions(resources, func(r *T) (topicKey, int) {
		return resourceKey(key(r)), 1
	}, func(*T, int) int32 { return 0 })
}

// tooManyPartitions reports whether a request naming distinct partitions
// (or config resources) asks for more work than one request may: each
// costs an answer of some hundred bytes in memory, all held until the
// response is written, so millions of them (a few bytes each in the
// request) would let one request exhaust the broker. No client needs more
// than a broker holds (Config.MaxPartitionsPerRequest). The request is
// refused like a frame over socket.request.max.bytes: the connection
// closes, and the log says why.
func (h *Handler) tooManyPartitions(creq *server.Request, distinct int) (server.Response, bool) {
	if distinct <= h.cfg.MaxPartitionsPerRequest {
		return server.Response{}, false
	}
	h.log.Warn("closing connection: request names too many partitions",
		"api", kmsg.NameForKey(creq.Key), "partitions", distinct, "max_partitions_per_request", h.cfg.MaxPartitionsPerRequest,
		"client", creq.Remote, "client_id", creq.ClientID)
	return server.Response{None: true, Close: true}, true
}
