package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind names a class of anomaly, after Jepsen's Kafka checker where one
// exists (jepsen.tests.kafka: lost-write, inconsistent-offsets,
// nonmonotonic-poll, poll-skip, duplicate, unseen).
type Kind string

// The anomalies Check reports.
const (
	// An acknowledged record missing from, or replaced in, the range a
	// consumer session read through its offset.
	LostWrite Kind = "lost-write"
	// An acknowledged record that no consumer read: no session reached its
	// offset (a test that did not read the log to its end, or a log that
	// lost its tail). Options.AllowUnseen accepts it.
	Unseen Kind = "unseen"
	// An acknowledged record read only at an offset other than the one it
	// was acknowledged at.
	WrongOffset Kind = "wrong-offset"
	// Two different values read at one topic/partition/offset.
	InconsistentOffsets Kind = "inconsistent-offsets"
	// A consumer session read an offset not above the one it read before.
	NonMonotonicPoll Kind = "nonmonotonic-poll"
	// A consumer session jumped over offsets known to hold records
	// (acknowledged there or read there by someone). Offsets nobody saw
	// as a record (transaction markers) and aborted records
	// (Recorder.ProduceAborted) may be skipped.
	PollSkip Kind = "poll-skip"
	// An idempotent producer's records to one partition acknowledged out
	// of the order it produced them in (Kafka keeps a producer's order
	// per partition when it is idempotent).
	NonMonotonicSend Kind = "nonmonotonic-send"
	// A value read that no producer of the history produced.
	Phantom Kind = "phantom"
	// A value read whose produce failed definitely.
	FailedButPresent Kind = "failed-but-present"
	// A value of an idempotent producer read at two positions (a
	// non-idempotent producer's are Report.AllowedDuplicates).
	Duplicate Kind = "duplicate"
	// One value produced twice: the history cannot be checked (values
	// must be unique).
	ReusedValue Kind = "reused-value"
	// A group's committed offset of a partition went backwards: a commit
	// or OffsetFetch after an acknowledged commit saw a lower offset.
	CommitBackwards Kind = "commit-backwards"
	// porcupine found no order of the operations of a partition in which
	// an append-only log answers what the clients saw.
	NonLinearizable Kind = "nonlinearizable"
)

// Anomaly is one thing wrong in a history, with a message naming the
// records, offsets and clients involved.
type Anomaly struct {
	Kind    Kind
	Message string
}

// Options bounds and relaxes Check. The zero value is the default.
type Options struct {
	// MaxLinearizableOps bounds the operations (appends, distinct offsets
	// read, end-offset answers) of one partition given to porcupine;
	// a partition with more is not checked for linearizability (the other
	// checks, linear in the history, still run) and Report.Notes says so.
	// Default DefaultMaxLinearizableOps.
	MaxLinearizableOps int
	// LinearizableTimeout bounds porcupine's search over all partitions;
	// when it runs out the result is porcupine.Unknown, noted, not a
	// failure. Default DefaultLinearizableTimeout.
	LinearizableTimeout time.Duration
	// AllowUnseen accepts acknowledged records that no consumer read.
	AllowUnseen bool
}

// The defaults of Options.
const (
	DefaultMaxLinearizableOps  = 20000
	DefaultLinearizableTimeout = 20 * time.Second
)

// Report is what Check found.
type Report struct {
	Anomalies []Anomaly
	// AllowedDuplicates are values of non-idempotent producers read at
	// more than one position (a retry the broker could not recognize).
	AllowedDuplicates []string
	// Linearizable is porcupine's verdict over the partitions checked.
	Linearizable porcupine.CheckResult
	// Notes says what was not checked and why (partitions above the
	// bound, a timeout).
	Notes []string
	Stats Stats

	linearization porcupine.LinearizationInfo
	linearized    bool
}

// Stats counts what the history holds.
type Stats struct {
	Produced, Acknowledged, FailedDefinitely, Indefinite int
	Reads, Sessions, Commits, EndOffsets                 int
	LinearizableOps, PartitionsLinearized                int
}

// OK reports whether the history has no anomaly. porcupine.Unknown (a
// timeout) is not an anomaly; it is in Notes.
func (rep *Report) OK() bool { return len(rep.Anomalies) == 0 }

// maxPerKind is how many anomalies of one kind String prints.
const maxPerKind = 10

// String is the report for a test's failure message: counts, then the
// anomalies by kind, at most maxPerKind of each.
func (rep *Report) String() string {
	var b strings.Builder
	s := rep.Stats
	fmt.Fprintf(&b, "history: %d produced (%d acknowledged, %d failed definitely, %d indefinite), %d reads in %d sessions, %d commits, %d end-offset answers; linearizability: %s over %d partitions (%d ops)\n",
		s.Produced, s.Acknowledged, s.FailedDefinitely, s.Indefinite, s.Reads, s.Sessions, s.Commits, s.EndOffsets, rep.Linearizable, s.PartitionsLinearized, s.LinearizableOps)
	byKind := map[Kind][]string{}
	var kinds []Kind
	for _, a := range rep.Anomalies {
		if byKind[a.Kind] == nil {
			kinds = append(kinds, a.Kind)
		}
		byKind[a.Kind] = append(byKind[a.Kind], a.Message)
	}
	for _, k := range kinds {
		msgs := byKind[k]
		fmt.Fprintf(&b, "%s: %d\n", k, len(msgs))
		for i, m := range msgs {
			if i == maxPerKind {
				fmt.Fprintf(&b, "  … and %d more\n", len(msgs)-maxPerKind)
				break
			}
			fmt.Fprintf(&b, "  %s\n", m)
		}
	}
	if n := len(rep.AllowedDuplicates); n > 0 {
		fmt.Fprintf(&b, "allowed duplicates (non-idempotent producers): %d, e.g. %q\n", n, rep.AllowedDuplicates[0])
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func (rep *Report) add(kind Kind, format string, args ...any) {
	rep.Anomalies = append(rep.Anomalies, Anomaly{Kind: kind, Message: fmt.Sprintf(format, args...)})
}

// pos is a record's place in the log.
type pos struct {
	topic     string
	partition int32
	offset    int64
}

func (p pos) String() string { return fmt.Sprintf("%s/%d@%d", p.topic, p.partition, p.offset) }

type partitionKey struct {
	topic     string
	partition int32
}

// produceState is what became of a produce.
type produceState int

const (
	pending produceState = iota // no completion recorded: indefinite
	acked
	failedDefinitely
	failedIndefinitely
)

type produce struct {
	op          int64
	process     string
	topic       string
	value       string
	idempotent  bool
	invokeTime  int64
	state       produceState
	at          pos // acked only
	returnTime  int64
	err         string
	invokeIndex int
	aborted     bool // acknowledged, then its transaction aborted
}

type read struct {
	process string
	session int64
	at      pos
	value   string
	time    int64
}

type session struct {
	id      int64
	process string
	key     partitionKey
	reads   []read
	offsets map[int64]string // offset → value read there (the first)
	min     int64
	max     int64
}

type commit struct {
	op         int64
	process    string
	group      string
	at         pos // offset: the committed next offset
	invokeTime int64
	ackTime    int64 // 0: not acknowledged
}

type endAnswer struct {
	process    string
	key        partitionKey
	end        int64
	invokeTime int64
	returnTime int64
}

type fetchedCommit struct {
	process    string
	group      string
	at         pos
	invokeTime int64
	returnTime int64
}

// analysis is a history indexed for the checks.
type analysis struct {
	events    []Event
	produces  []*produce
	byValue   map[string][]*produce
	reads     []read
	sessions  map[int64]*session
	readsAt   map[pos]map[string][]read // position → value → reads
	readPos   map[string][]pos          // value → distinct positions read at
	commits   []*commit
	ends      []endAnswer
	fetches   []fetchedCommit
	lastTime  int64
	dataByKey map[partitionKey][]int64 // sorted offsets known to hold records
}

func analyze(events []Event) *analysis {
	a := &analysis{events: events, byValue: map[string][]*produce{}, sessions: map[int64]*session{},
		readsAt: map[pos]map[string][]read{}, readPos: map[string][]pos{}, dataByKey: map[partitionKey][]int64{}}
	ops := map[int64]*produce{}
	commitOps := map[int64][]*commit{}
	invokes := map[int64]Event{}
	for _, e := range events {
		a.lastTime = max(a.lastTime, e.Time)
		switch e.Type {
		case Invoke:
			p := &produce{op: e.Op, process: e.Process, topic: e.Topic, value: e.Value, idempotent: e.Idempotent, invokeTime: e.Time, invokeIndex: e.Index}
			ops[e.Op] = p
			a.produces = append(a.produces, p)
			a.byValue[e.Value] = append(a.byValue[e.Value], p)
		case OK, Fail, Info:
			p := ops[e.Op]
			if p == nil || p.state != pending {
				continue // a completion without its invoke, or a second one: the first stands
			}
			p.returnTime, p.err = e.Time, e.Error
			switch e.Type {
			case OK:
				p.state, p.at = acked, pos{p.topic, e.Partition, e.Offset}
			case Fail:
				p.state = failedDefinitely
			default:
				p.state = failedIndefinitely
			}
		case Abort:
			if p := ops[e.Op]; p != nil {
				p.aborted = true
			}
		case Session:
			a.sessions[e.Session] = &session{id: e.Session, process: e.Process, key: partitionKey{e.Topic, e.Partition}, offsets: map[int64]string{}}
		case Poll:
			rd := read{process: e.Process, session: e.Session, at: pos{e.Topic, e.Partition, e.Offset}, value: e.Value, time: e.Time}
			a.reads = append(a.reads, rd)
			s := a.sessions[e.Session]
			if s == nil {
				s = &session{id: e.Session, process: e.Process, key: partitionKey{e.Topic, e.Partition}, offsets: map[int64]string{}}
				a.sessions[e.Session] = s
			}
			if len(s.reads) == 0 {
				s.min, s.max = e.Offset, e.Offset
			}
			s.min, s.max = min(s.min, e.Offset), max(s.max, e.Offset)
			s.reads = append(s.reads, rd)
			if _, ok := s.offsets[e.Offset]; !ok {
				s.offsets[e.Offset] = e.Value
			}
			byValue := a.readsAt[rd.at]
			if byValue == nil {
				byValue = map[string][]read{}
				a.readsAt[rd.at] = byValue
			}
			if len(byValue[e.Value]) == 0 {
				a.readPos[e.Value] = append(a.readPos[e.Value], rd.at)
			}
			byValue[e.Value] = append(byValue[e.Value], rd)
		case EndInvoke, FetchCommittedInvoke:
			invokes[e.Op] = e
		case End:
			a.ends = append(a.ends, endAnswer{process: e.Process, key: partitionKey{e.Topic, e.Partition}, end: e.Offset, invokeTime: invokes[e.Op].Time, returnTime: e.Time})
		case FetchCommitted:
			inv := invokes[e.Op]
			a.fetches = append(a.fetches, fetchedCommit{process: inv.Process, group: e.Group, at: pos{e.Topic, e.Partition, e.Offset}, invokeTime: inv.Time, returnTime: e.Time})
		case CommitInvoke:
			c := &commit{op: e.Op, process: e.Process, group: e.Group, at: pos{e.Topic, e.Partition, e.Offset}, invokeTime: e.Time}
			a.commits = append(a.commits, c)
			commitOps[e.Op] = append(commitOps[e.Op], c)
		case CommitOK:
			for _, c := range commitOps[e.Op] {
				if c.at.topic == e.Topic && c.at.partition == e.Partition && c.ackTime == 0 {
					c.ackTime = e.Time
				}
			}
		}
	}
	known := map[partitionKey]map[int64]bool{}
	mark := func(p pos) {
		k := partitionKey{p.topic, p.partition}
		if known[k] == nil {
			known[k] = map[int64]bool{}
		}
		known[k][p.offset] = true
	}
	// Aborted records are not records a consumer must return: a
	// read_committed one skips them.
	aborted := map[string]bool{}
	for _, p := range a.produces {
		if p.state == acked && !p.aborted {
			mark(p.at)
		}
		if p.aborted {
			aborted[p.value] = true
		}
	}
	for at, byValue := range a.readsAt {
		for v := range byValue {
			if !aborted[v] {
				mark(at)
			}
		}
	}
	for k, offs := range known {
		a.dataByKey[k] = slices.Sorted(maps.Keys(offs))
	}
	return a
}

// knownBetween returns the offsets of key known to hold records strictly
// between lo and hi.
func (a *analysis) knownBetween(key partitionKey, lo, hi int64) []int64 {
	offs := a.dataByKey[key]
	i := sort.Search(len(offs), func(i int) bool { return offs[i] > lo })
	j := sort.Search(len(offs), func(i int) bool { return offs[i] >= hi })
	return offs[i:j]
}

// Check judges events (a history recorded by a Recorder, or read back with
// ReadJSONLines).
func Check(events []Event, opts Options) *Report {
	if opts.MaxLinearizableOps == 0 {
		opts.MaxLinearizableOps = DefaultMaxLinearizableOps
	}
	if opts.LinearizableTimeout == 0 {
		opts.LinearizableTimeout = DefaultLinearizableTimeout
	}
	a := analyze(events)
	rep := &Report{}
	rep.Stats.Reads, rep.Stats.Sessions, rep.Stats.EndOffsets = len(a.reads), len(a.sessions), len(a.ends)
	for _, p := range a.produces {
		rep.Stats.Produced++
		switch p.state {
		case acked:
			rep.Stats.Acknowledged++
		case failedDefinitely:
			rep.Stats.FailedDefinitely++
		default:
			rep.Stats.Indefinite++
		}
	}
	for _, c := range a.commits {
		if c.ackTime != 0 {
			rep.Stats.Commits++
		}
	}
	checkValues(a, rep)
	checkLostWrites(a, rep, opts)
	checkInconsistentOffsets(a, rep)
	checkSessions(a, rep)
	checkSends(a, rep)
	checkCommits(a, rep)
	checkLinearizable(a, rep, opts)
	return rep
}

// describeReads names who read at a position: "c1 (session 3), c2 (session 5)".
func describeReads(reads []read) string {
	var parts []string
	seen := map[int64]bool{}
	for _, r := range reads {
		if !seen[r.session] {
			seen[r.session] = true
			parts = append(parts, fmt.Sprintf("%s (session %d)", r.process, r.session))
		}
	}
	return strings.Join(parts, ", ")
}

// checkValues: reused values, phantoms, failed-but-present, duplicates.
func checkValues(a *analysis, rep *Report) {
	for _, p := range a.produces {
		if ps := a.byValue[p.value]; len(ps) > 1 && ps[0] == p {
			rep.add(ReusedValue, "value %q produced %d times (by %s first): values must be unique", p.value, len(ps), p.process)
		}
	}
	values := slices.Sorted(maps.Keys(a.readPos))
	for _, v := range values {
		positions := a.readPos[v]
		ps := a.byValue[v]
		if len(ps) == 0 {
			for _, at := range positions {
				rep.add(Phantom, "%q read at %s by %s was never produced", v, at, describeReads(a.readsAt[at][v]))
			}
			continue
		}
		p := ps[0]
		if p.state == failedDefinitely {
			rep.add(FailedButPresent, "%q (produced by %s) failed definitely (%s) but was read at %s by %s", v, p.process, p.err, positions[0], describeReads(a.readsAt[positions[0]][v]))
		}
		if len(positions) > 1 && len(ps) == 1 {
			var where []string
			for _, at := range positions {
				where = append(where, fmt.Sprintf("%s by %s", at, describeReads(a.readsAt[at][v])))
			}
			if p.idempotent {
				rep.add(Duplicate, "%q of idempotent producer %s is in the log %d times: %s", v, p.process, len(positions), strings.Join(where, "; "))
			} else {
				rep.AllowedDuplicates = append(rep.AllowedDuplicates, v)
			}
		}
	}
}

// checkLostWrites: every acknowledged record is read, at its offset, by
// every session whose reads span that offset.
func checkLostWrites(a *analysis, rep *Report, opts Options) {
	byKey := map[partitionKey][]*session{}
	for _, s := range a.sessions {
		if len(s.reads) > 0 {
			byKey[s.key] = append(byKey[s.key], s)
		}
	}
	for _, ss := range byKey {
		slices.SortFunc(ss, func(x, y *session) int { return cmp.Compare(x.id, y.id) })
	}
	for _, p := range a.produces {
		if p.state != acked || p.aborted {
			continue
		}
		key := partitionKey{p.at.topic, p.at.partition}
		var problems []string
		covered, readHere := false, false
		highest := int64(-1)
		for _, s := range byKey[key] {
			highest = max(highest, s.max)
			if p.at.offset < s.min || p.at.offset > s.max {
				continue
			}
			covered = true
			switch got, ok := s.offsets[p.at.offset]; {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s (session %d) read offsets %d..%d without %d", s.process, s.id, s.min, s.max, p.at.offset))
			case got != p.value:
				problems = append(problems, fmt.Sprintf("%s (session %d) read %q there", s.process, s.id, got))
			default:
				readHere = true
			}
		}
		if len(problems) > 0 {
			if len(problems) > 3 {
				problems = append(problems[:3], fmt.Sprintf("and %d more sessions", len(problems)-3))
			}
			rep.add(LostWrite, "%q acknowledged to %s at %s: %s", p.value, p.process, p.at, strings.Join(problems, "; "))
			continue
		}
		if readHere {
			continue
		}
		if elsewhere := a.readPos[p.value]; len(elsewhere) > 0 {
			rep.add(WrongOffset, "%q acknowledged to %s at %s was read only at %s", p.value, p.process, p.at, elsewhere[0])
			continue
		}
		if !covered && !opts.AllowUnseen {
			if highest < 0 {
				rep.add(Unseen, "%q acknowledged to %s at %s was never read: no consumer read %s/%d", p.value, p.process, p.at, key.topic, key.partition)
			} else {
				rep.add(Unseen, "%q acknowledged to %s at %s was never read: no consumer session spans offset %d (the highest offset read is %d)", p.value, p.process, p.at, p.at.offset, highest)
			}
		}
	}
}

// checkInconsistentOffsets: one value per position.
func checkInconsistentOffsets(a *analysis, rep *Report) {
	positions := slices.SortedFunc(maps.Keys(a.readsAt), func(x, y pos) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition), cmp.Compare(x.offset, y.offset))
	})
	for _, at := range positions {
		byValue := a.readsAt[at]
		if len(byValue) < 2 {
			continue
		}
		var parts []string
		for _, v := range slices.Sorted(maps.Keys(byValue)) {
			parts = append(parts, fmt.Sprintf("%q by %s", v, describeReads(byValue[v])))
		}
		rep.add(InconsistentOffsets, "%s holds %d values: %s", at, len(byValue), strings.Join(parts, "; "))
	}
}

// checkSessions: within a session offsets increase, and skip only offsets
// nobody knows a record at.
func checkSessions(a *analysis, rep *Report) {
	ids := slices.Sorted(maps.Keys(a.sessions))
	for _, id := range ids {
		s := a.sessions[id]
		for i := 1; i < len(s.reads); i++ {
			prev, next := s.reads[i-1].at.offset, s.reads[i].at.offset
			switch {
			case next <= prev:
				rep.add(NonMonotonicPoll, "%s (session %d) read %s/%d offset %d (%q) after offset %d (%q)", s.process, s.id, s.key.topic, s.key.partition, next, s.reads[i].value, prev, s.reads[i-1].value)
			case next > prev+1:
				if skipped := a.knownBetween(s.key, prev, next); len(skipped) > 0 {
					rep.add(PollSkip, "%s (session %d) read %s/%d offset %d right after %d, skipping %d offsets known to hold records: %s", s.process, s.id, s.key.topic, s.key.partition, next, prev, len(skipped), offsetList(skipped))
				}
			}
		}
	}
}

// checkSends: an idempotent producer's records to a partition are
// acknowledged at increasing offsets in the order it produced them.
func checkSends(a *analysis, rep *Report) {
	type producerPartition struct {
		process string
		partitionKey
	}
	last := map[producerPartition]*produce{}
	for _, p := range a.produces { // in invocation order
		if p.state != acked || !p.idempotent {
			continue
		}
		k := producerPartition{p.process, partitionKey{p.at.topic, p.at.partition}}
		if prev := last[k]; prev != nil && p.at.offset <= prev.at.offset {
			rep.add(NonMonotonicSend, "idempotent producer %s: %q produced after %q to %s/%d was acknowledged at offset %d, not after %d", p.process, p.value, prev.value, k.topic, k.partition, p.at.offset, prev.at.offset)
			continue
		}
		last[k] = p
	}
}

func offsetList(offs []int64) string {
	var parts []string
	for i, o := range offs {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("… (%d in all)", len(offs)))
			break
		}
		parts = append(parts, fmt.Sprint(o))
	}
	return strings.Join(parts, ", ")
}

// checkCommits: once a commit of offset n is acknowledged, a later commit
// (invoked after the acknowledgement) and a later OffsetFetch of that
// group and partition see at least n.
func checkCommits(a *analysis, rep *Report) {
	type groupPartition struct {
		group string
		partitionKey
	}
	ackedBy := map[groupPartition][]*commit{}
	for _, c := range a.commits {
		if c.ackTime != 0 {
			k := groupPartition{c.group, partitionKey{c.at.topic, c.at.partition}}
			ackedBy[k] = append(ackedBy[k], c)
		}
	}
	// highestBefore returns the acknowledged commit of k with the highest
	// offset acknowledged before t.
	highestBefore := func(k groupPartition, t int64) *commit {
		var best *commit
		for _, c := range ackedBy[k] {
			if c.ackTime < t && (best == nil || c.at.offset > best.at.offset) {
				best = c
			}
		}
		return best
	}
	for _, k := range slices.SortedFunc(maps.Keys(ackedBy), func(x, y groupPartition) int {
		return cmp.Or(cmp.Compare(x.group, y.group), cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	}) {
		for _, c := range ackedBy[k] {
			if prev := highestBefore(k, c.invokeTime); prev != nil && c.at.offset < prev.at.offset {
				rep.add(CommitBackwards, "group %s %s/%d: %s committed offset %d after %s's commit of %d was acknowledged", k.group, k.topic, k.partition, c.process, c.at.offset, prev.process, prev.at.offset)
			}
		}
	}
	for _, f := range a.fetches {
		k := groupPartition{f.group, partitionKey{f.at.topic, f.at.partition}}
		if prev := highestBefore(k, f.invokeTime); prev != nil && f.at.offset < prev.at.offset {
			rep.add(CommitBackwards, "group %s %s/%d: OffsetFetch by %s answered %d after %s's commit of %d was acknowledged", k.group, k.topic, k.partition, f.process, f.at.offset, prev.process, prev.at.offset)
		}
	}
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
