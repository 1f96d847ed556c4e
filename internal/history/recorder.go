package history

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Type is what an Event records.
type Type string

// The event types. A produce is an operation of two events, an invoke and
// its completion (ok, fail or info) with the same Op; a commit likewise
// (commit-invoke, then commit-ok or commit-fail per partition). A poll, an
// end-offsets observation and a session start are single events.
const (
	// Produce invoked: Process, Op, Topic, Value, Idempotent.
	Invoke Type = "invoke"
	// Produce acknowledged at Partition/Offset.
	OK Type = "ok"
	// Produce failed definitely: the broker refused it, it is in no log.
	Fail Type = "fail"
	// Produce failed indefinitely (a timeout, a closed connection, the
	// client closed with it buffered): it may or may not be in the log.
	Info Type = "info"
	// Produce acknowledged, then aborted with its transaction: it holds
	// its offset, read_committed consumers skip it.
	Abort Type = "abort"
	// A consumer's poll returned the record Value at Topic/Partition/Offset
	// in its session Session.
	Poll Type = "poll"
	// A consumer (re)started reading Topic/Partition: a new Session, whose
	// reads may start anywhere (a reassignment, a restart, a seek).
	Session Type = "session"
	// ListOffsets answered the end offset Offset of Topic/Partition; Op
	// pairs it with the end-invoke event recorded before the request.
	EndInvoke Type = "end-invoke"
	End       Type = "end"
	// Group commit of Topic/Partition to Offset invoked (Op), then
	// acknowledged or failed per partition.
	CommitInvoke Type = "commit-invoke"
	CommitOK     Type = "commit-ok"
	CommitFail   Type = "commit-fail"
	// OffsetFetch answered Offset as Group's committed offset of
	// Topic/Partition; Op pairs it with the fetch-invoke event.
	FetchCommittedInvoke Type = "fetch-committed-invoke"
	FetchCommitted       Type = "fetch-committed"
)

// Event is one line of a history. Time is monotonic nanoseconds since the
// Recorder was made, strictly increasing in recording order.
type Event struct {
	Index      int    `json:"i"`
	Time       int64  `json:"t"`
	Type       Type   `json:"type"`
	Process    string `json:"process"`
	Op         int64  `json:"op,omitempty"`
	Session    int64  `json:"session,omitempty"`
	Group      string `json:"group,omitempty"`
	Topic      string `json:"topic,omitempty"`
	Partition  int32  `json:"partition"`
	Offset     int64  `json:"offset"`
	Value      string `json:"value,omitempty"`
	Idempotent bool   `json:"idempotent,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Recorder collects the history of a run. It is safe for concurrent use:
// the tests' clients (directly, or through NewProducer and NewConsumer)
// record what they did, and Check judges the whole history afterwards.
type Recorder struct {
	start time.Time

	mu       sync.Mutex
	events   []Event
	lastTime int64
	nextOp   int64
	// sessions is each consumer's current session per partition; a read
	// of a partition without one opens one.
	sessions    map[sessionKey]int64
	nextSession int64
	// highest is the highest offset each consumer read of each
	// partition; commits the offsets of commits not yet answered, and
	// committedMax the highest acknowledged commit per group and
	// partition (for Consumer.Drain).
	highest      map[sessionKey]int64
	commits      map[int64]pendingCommit
	committedMax map[commitTarget]int64
}

// pendingCommit is the group and offsets of a commit being answered.
type pendingCommit struct {
	group   string
	offsets map[partitionKey]int64
}

// commitTarget is a group's partition.
type commitTarget struct {
	group     string
	topic     string
	partition int32
}

type sessionKey struct {
	process   string
	topic     string
	partition int32
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), sessions: map[sessionKey]int64{}, highest: map[sessionKey]int64{},
		commits: map[int64]pendingCommit{}, committedMax: map[commitTarget]int64{}}
}

// addLocked stamps e with the next index and a time after every earlier
// event's, and appends it.
func (r *Recorder) addLocked(e Event) Event {
	now := time.Since(r.start).Nanoseconds()
	if now <= r.lastTime {
		now = r.lastTime + 1
	}
	r.lastTime = now
	e.Index, e.Time = len(r.events), now
	r.events = append(r.events, e)
	return e
}

func (r *Recorder) add(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addLocked(e)
}

// invoke records the first event of an operation and returns its id.
func (r *Recorder) invoke(e Event) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextOp++
	e.Op = r.nextOp
	r.addLocked(e)
	return e.Op
}

// ProduceInvoked records that producer process began producing value to
// topic and returns the operation's id for ProduceAcked or ProduceFailed.
// Values must be unique in a history (Check reports a value produced
// twice); idempotent says whether the producer is idempotent (then the
// value must never appear twice in the log).
func (r *Recorder) ProduceInvoked(process, topic, value string, idempotent bool) int64 {
	return r.invoke(Event{Type: Invoke, Process: process, Topic: topic, Value: value, Idempotent: idempotent})
}

// ProduceAcked records that operation op was acknowledged at
// partition/offset.
func (r *Recorder) ProduceAcked(op int64, partition int32, offset int64) {
	r.add(Event{Type: OK, Op: op, Partition: partition, Offset: offset})
}

// ProduceFailed records that operation op failed with err: definitely (the
// record is in no log: the broker refused it) or not (a timeout, a lost
// connection: it may have been appended).
func (r *Recorder) ProduceFailed(op int64, err error, definite bool) {
	typ := Info
	if definite {
		typ = Fail
	}
	r.add(Event{Type: typ, Op: op, Error: errorString(err)})
}

// ProduceAborted records that acknowledged operation op belonged to a
// transaction that was aborted: it keeps its offset in the log, a
// read_committed consumer skips it (no lost write), a read_uncommitted one
// may read it.
func (r *Recorder) ProduceAborted(op int64) {
	r.add(Event{Type: Abort, Op: op})
}

// NewSession records that consumer process starts a new session of reads
// of topic/partition: its next reads may start at any offset (after a
// reassignment, a restart or a seek). Within a session offsets must
// increase without skipping a record.
func (r *Recorder) NewSession(process, topic string, partition int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.newSessionLocked(sessionKey{process, topic, partition})
}

func (r *Recorder) newSessionLocked(k sessionKey) int64 {
	r.nextSession++
	r.sessions[k] = r.nextSession
	r.addLocked(Event{Type: Session, Process: k.process, Topic: k.topic, Partition: k.partition, Session: r.nextSession})
	return r.nextSession
}

// EndSessions ends every session of consumer process (a consumer that
// closed or restarts): its next read of each partition opens a new one.
func (r *Recorder) EndSessions(process string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.sessions {
		if k.process == process {
			delete(r.sessions, k)
		}
	}
}

// Polled records that consumer process read value at
// topic/partition/offset.
func (r *Recorder) Polled(process, topic string, partition int32, offset int64, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sessionKey{process, topic, partition}
	s, ok := r.sessions[k]
	if !ok {
		s = r.newSessionLocked(k)
	}
	r.addLocked(Event{Type: Poll, Process: process, Session: s, Topic: topic, Partition: partition, Offset: offset, Value: value})
	if h, ok := r.highest[k]; !ok || offset > h {
		r.highest[k] = offset
	}
}

// highestRead is the highest offset process read of topic/partition, -1
// for none.
func (r *Recorder) highestRead(process, topic string, partition int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.highest[sessionKey{process, topic, partition}]; ok {
		return h
	}
	return -1
}

// committed is the highest acknowledged commit of group for
// topic/partition, -1 for none.
func (r *Recorder) committed(group, topic string, partition int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.committedMax[commitTarget{group, topic, partition}]; ok {
		return c
	}
	return -1
}

// EndOffsetsInvoked records that process asks for the end offsets of
// topic; EndOffset records each answer with the returned id.
func (r *Recorder) EndOffsetsInvoked(process, topic string) int64 {
	return r.invoke(Event{Type: EndInvoke, Process: process, Topic: topic})
}

// EndOffset records that ListOffsets (latest) answered end for
// topic/partition, for the request op.
func (r *Recorder) EndOffset(op int64, process, topic string, partition int32, end int64) {
	r.add(Event{Type: End, Op: op, Process: process, Topic: topic, Partition: partition, Offset: end})
}

// CommitInvoked records that process of group began committing offsets
// (topic → partition → next offset to consume) and returns the id for
// CommitAcked and CommitFailed.
func (r *Recorder) CommitInvoked(process, group string, offsets map[string]map[int32]int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextOp++
	op := r.nextOp
	pc := pendingCommit{group: group, offsets: map[partitionKey]int64{}}
	for _, topic := range sortedKeys(offsets) {
		for _, p := range sortedKeys(offsets[topic]) {
			r.addLocked(Event{Type: CommitInvoke, Op: op, Process: process, Group: group, Topic: topic, Partition: p, Offset: offsets[topic][p]})
			pc.offsets[partitionKey{topic, p}] = offsets[topic][p]
		}
	}
	r.commits[op] = pc
	return op
}

// CommitAcked records that commit op's offset for topic/partition was
// acknowledged.
func (r *Recorder) CommitAcked(op int64, topic string, partition int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(Event{Type: CommitOK, Op: op, Topic: topic, Partition: partition})
	if offset, group, ok := r.answeredLocked(op, topic, partition); ok {
		target := commitTarget{group, topic, partition}
		if c, ok := r.committedMax[target]; !ok || offset > c {
			r.committedMax[target] = offset
		}
	}
}

// answeredLocked returns the offset and group of commit op for
// topic/partition and forgets it (a commit is answered once per
// partition).
func (r *Recorder) answeredLocked(op int64, topic string, partition int32) (offset int64, group string, ok bool) {
	pc, ok := r.commits[op]
	k := partitionKey{topic, partition}
	if offset, ok = pc.offsets[k]; !ok {
		return 0, "", false
	}
	delete(pc.offsets, k)
	if len(pc.offsets) == 0 {
		delete(r.commits, op)
	}
	return offset, pc.group, true
}

// CommitFailed records that commit op's offset for topic/partition failed.
func (r *Recorder) CommitFailed(op int64, topic string, partition int32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(Event{Type: CommitFail, Op: op, Topic: topic, Partition: partition, Error: errorString(err)})
	r.answeredLocked(op, topic, partition)
}

// FetchCommittedInvoked records that process asks for group's committed
// offsets; FetchedCommitted records each answer with the returned id.
func (r *Recorder) FetchCommittedInvoked(process, group string) int64 {
	return r.invoke(Event{Type: FetchCommittedInvoke, Process: process, Group: group})
}

// FetchedCommitted records that OffsetFetch answered offset as group's
// committed offset of topic/partition, for the request op.
func (r *Recorder) FetchedCommitted(op int64, group, topic string, partition int32, offset int64) {
	r.add(Event{Type: FetchCommitted, Op: op, Group: group, Topic: topic, Partition: partition, Offset: offset})
}

// Events returns a copy of the history so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// WriteJSONLines writes events as JSON, one per line.
func WriteJSONLines(w io.Writer, events []Event) error {
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// ReadJSONLines reads a history written by WriteJSONLines.
func ReadJSONLines(rd io.Reader) ([]Event, error) {
	dec := json.NewDecoder(rd)
	var events []Event
	for {
		var e Event
		if err := dec.Decode(&e); err == io.EOF {
			return events, nil
		} else if err != nil {
			return events, fmt.Errorf("history line %d: %w", len(events)+1, err)
		}
		events = append(events, e)
	}
}

func errorString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
