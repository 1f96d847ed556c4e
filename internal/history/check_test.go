package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The hand-made histories below each break one property (and whatever a
// broken log necessarily breaks with it); the checker must name exactly
// those kinds, with the records involved. They are what proves the checker
// can fail.

const topic = "t"

func ack(r *Recorder, process, value string, offset int64) {
	r.ProduceAcked(r.ProduceInvoked(process, topic, value, true), 0, offset)
}

func reads(r *Recorder, consumer string, offsetValues ...any) {
	for i := 0; i < len(offsetValues); i += 2 {
		r.Polled(consumer, topic, 0, int64(offsetValues[i].(int)), offsetValues[i+1].(string))
	}
}

// correct is a clean history: two producers, two consumers, a group.
func correct(r *Recorder) {
	ack(r, "p1", "a", 0)
	ack(r, "p2", "b", 1)
	ack(r, "p1", "c", 2)
	reads(r, "c1", 0, "a", 1, "b", 2, "c")
	reads(r, "c2", 1, "b", 2, "c") // started later: a session may begin anywhere
	op := r.CommitInvoked("c1", "g", map[string]map[int32]int64{topic: {0: 3}})
	r.CommitAcked(op, topic, 0)
	end := r.EndOffsetsInvoked("c1", topic)
	r.EndOffset(end, "c1", topic, 0, 3)
	f := r.FetchCommittedInvoked("c2", "g")
	r.FetchedCommitted(f, "g", topic, 0, 3)
}

func TestCheckHandMade(t *testing.T) {
	cases := []struct {
		name  string
		build func(r *Recorder)
		opts  Options
		want  []Kind   // exactly these kinds, in any order
		says  []string // substrings of the report
	}{
		{name: "correct", build: correct},
		{name: "transaction marker skipped", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p1", "c", 2) // offset 1: a marker nobody sees
			reads(r, "c1", 0, "a", 2, "c")
		}},
		{name: "aborted records skipped by read_committed, read by read_uncommitted", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			op := r.ProduceInvoked("p2", topic, "x", true)
			r.ProduceAcked(op, 0, 1)
			r.ProduceAborted(op) // offset 2: the abort marker
			ack(r, "p1", "c", 3)
			reads(r, "committed", 0, "a", 3, "c")
			reads(r, "uncommitted", 0, "a", 1, "x", 3, "c")
		}},
		{name: "lost write: offset reused after a restart", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p1", "b", 1)
			ack(r, "p2", "d", 1) // the broker forgot b and gave its offset to d
			reads(r, "c1", 0, "a", 1, "d")
		}, want: []Kind{LostWrite, NonLinearizable},
			says: []string{`"b" acknowledged to p1 at t/0@1: c1 (session 1) read "d" there`}},
		{name: "lost write: a hole in a consumer's range", build: func(r *Recorder) {
			correct(r)
			reads(r, "c3", 0, "a", 2, "c")
		}, want: []Kind{LostWrite, PollSkip},
			says: []string{`"b" acknowledged to p2 at t/0@1: c3 (session 3) read offsets 0..2 without 1`,
				"c3 (session 3) read t/0 offset 2 right after 0, skipping 1 offsets known to hold records: 1"}},
		{name: "unseen", build: func(r *Recorder) {
			correct(r)
			ack(r, "p2", "e", 3)
		}, want: []Kind{Unseen},
			says: []string{`"e" acknowledged to p2 at t/0@3 was never read: no consumer session spans offset 3 (the highest offset read is 2)`}},
		{name: "unseen allowed", build: func(r *Recorder) {
			correct(r)
			ack(r, "p2", "e", 3)
		}, opts: Options{AllowUnseen: true}},
		{name: "wrong offset", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p1", "b", 2)
			reads(r, "c1", 0, "a", 1, "b")
		}, want: []Kind{WrongOffset}, says: []string{`"b" acknowledged to p1 at t/0@2 was read only at t/0@1`}},
		{name: "inconsistent offsets", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			r.ProduceFailed(r.ProduceInvoked("p1", topic, "b", true), kerr.RequestTimedOut, false)
			r.ProduceFailed(r.ProduceInvoked("p2", topic, "c", true), kerr.RequestTimedOut, false)
			reads(r, "c1", 0, "a", 1, "b")
			reads(r, "c2", 0, "a", 1, "c")
		}, want: []Kind{InconsistentOffsets, NonLinearizable},
			says: []string{`t/0@1 holds 2 values: "b" by c1 (session 1); "c" by c2 (session 2)`}},
		{name: "nonmonotonic poll", build: func(r *Recorder) {
			correct(r)
			reads(r, "c1", 1, "b")
		}, want: []Kind{NonMonotonicPoll}, says: []string{`c1 (session 1) read t/0 offset 1 ("b") after offset 2 ("c")`}},
		{name: "a new session may go back", build: func(r *Recorder) {
			correct(r)
			r.NewSession("c1", topic, 0)
			reads(r, "c1", 1, "b")
		}},
		{name: "poll skip over a record only another consumer saw", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			r.ProduceFailed(r.ProduceInvoked("p1", topic, "b", true), kerr.RequestTimedOut, false)
			ack(r, "p1", "c", 2)
			reads(r, "c1", 0, "a", 1, "b", 2, "c")
			reads(r, "c2", 0, "a", 2, "c")
		}, want: []Kind{PollSkip}, says: []string{"c2 (session 2) read t/0 offset 2 right after 0, skipping 1 offsets known to hold records: 1"}},
		{name: "nonmonotonic send of an idempotent producer", build: func(r *Recorder) {
			a := r.ProduceInvoked("p1", topic, "a", true)
			b := r.ProduceInvoked("p1", topic, "b", true) // in flight together
			r.ProduceAcked(b, 0, 0)
			r.ProduceAcked(a, 0, 1)
			reads(r, "c1", 0, "b", 1, "a")
		}, want: []Kind{NonMonotonicSend}, says: []string{`idempotent producer p1: "b" produced after "a" to t/0 was acknowledged at offset 0, not after 1`}},
		{name: "a non-idempotent producer may reorder", build: func(r *Recorder) {
			a := r.ProduceInvoked("p1", topic, "a", false)
			b := r.ProduceInvoked("p1", topic, "b", false)
			r.ProduceAcked(b, 0, 0)
			r.ProduceAcked(a, 0, 1)
			reads(r, "c1", 0, "b", 1, "a")
		}},
		{name: "phantom", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p1", "c", 2)
			reads(r, "c1", 0, "a", 1, "z", 2, "c")
		}, want: []Kind{Phantom}, says: []string{`"z" read at t/0@1 by c1 (session 1) was never produced`}},
		{name: "failed definitely but present", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			r.ProduceFailed(r.ProduceInvoked("p1", topic, "b", true), kerr.MessageTooLarge, true)
			ack(r, "p1", "c", 2)
			reads(r, "c1", 0, "a", 1, "b", 2, "c")
		}, want: []Kind{FailedButPresent}, says: []string{`"b" (produced by p1) failed definitely (MESSAGE_TOO_LARGE`}},
		{name: "duplicate of an idempotent producer", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p1", "c", 2)
			reads(r, "c1", 0, "a", 1, "a", 2, "c")
		}, want: []Kind{Duplicate}, says: []string{`"a" of idempotent producer p1 is in the log 2 times: t/0@0 by c1 (session 1); t/0@1 by c1 (session 1)`}},
		{name: "duplicate of a non-idempotent producer is allowed", build: func(r *Recorder) {
			r.ProduceAcked(r.ProduceInvoked("p1", topic, "a", false), 0, 0)
			ack(r, "p1", "c", 2)
			reads(r, "c1", 0, "a", 1, "a", 2, "c")
		}, says: []string{"allowed duplicates (non-idempotent producers): 1"}},
		{name: "value reused by the test", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			ack(r, "p2", "a", 1)
			reads(r, "c1", 0, "a", 1, "a")
		}, want: []Kind{ReusedValue}, says: []string{`value "a" produced 2 times (by p1 first)`}},
		{name: "commit backwards", build: func(r *Recorder) {
			correct(r)
			op := r.CommitInvoked("c2", "g", map[string]map[int32]int64{topic: {0: 1}})
			r.CommitAcked(op, topic, 0)
		}, want: []Kind{CommitBackwards}, says: []string{"group g t/0: c2 committed offset 1 after c1's commit of 3 was acknowledged"}},
		{name: "committed offset fetched backwards", build: func(r *Recorder) {
			correct(r)
			f := r.FetchCommittedInvoked("c3", "g")
			r.FetchedCommitted(f, "g", topic, 0, -1)
		}, want: []Kind{CommitBackwards}, says: []string{"group g t/0: OffsetFetch by c3 answered -1 after c1's commit of 3 was acknowledged"}},
		{name: "concurrent commits may land in either order", build: func(r *Recorder) {
			hi := r.CommitInvoked("c1", "g", map[string]map[int32]int64{topic: {0: 3}})
			lo := r.CommitInvoked("c2", "g", map[string]map[int32]int64{topic: {0: 1}})
			r.CommitAcked(hi, topic, 0)
			r.CommitAcked(lo, topic, 0)
		}},
		{name: "nonlinearizable: appends reordered", build: func(r *Recorder) {
			ack(r, "p1", "a", 1) // acknowledged before b began, placed after it
			ack(r, "p2", "b", 0)
			reads(r, "c1", 0, "b", 1, "a")
		}, want: []Kind{NonLinearizable}, says: []string{`t/0: no order of its 4 operations is an append-only log's (porcupine); the longest legal order places 0, and cannot place append "a" → 1`}},
		{name: "nonlinearizable: the end went backwards", build: func(r *Recorder) {
			correct(r)
			end := r.EndOffsetsInvoked("c2", topic)
			r.EndOffset(end, "c2", topic, 0, 2)
		}, want: []Kind{NonLinearizable}, says: []string{"cannot place end → 2"}},
		{name: "nonlinearizable: read before it was produced", build: func(r *Recorder) {
			ack(r, "p1", "a", 0)
			reads(r, "c1", 0, "a", 1, "b")
			ack(r, "p1", "b", 1)
		}, want: []Kind{NonLinearizable}, says: []string{`cannot place read 1 → "b"`}},
		{name: "above the bound: not checked, said so", build: func(r *Recorder) {
			ack(r, "p1", "a", 1)
			ack(r, "p2", "b", 0)
			reads(r, "c1", 0, "b", 1, "a")
		}, opts: Options{MaxLinearizableOps: 3}, says: []string{"t/0 not checked for linearizability: 4 operations, above the bound of 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			tc.build(r)
			rep := Check(r.Events(), tc.opts)
			var got []Kind
			for _, a := range rep.Anomalies {
				if !slices.Contains(got, a.Kind) {
					got = append(got, a.Kind)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("anomalies %v, want %v\n%s", got, want, rep)
			}
			if rep.OK() != (len(tc.want) == 0) {
				t.Fatalf("OK() = %v with anomalies %v", rep.OK(), got)
			}
			text := rep.String()
			for _, s := range tc.says {
				if !strings.Contains(text, s) {
					t.Errorf("report lacks %q:\n%s", s, text)
				}
			}
			if slices.Contains(tc.want, NonLinearizable) != (rep.Linearizable == porcupine.Illegal) {
				t.Errorf("porcupine: %s", rep.Linearizable)
			}
		})
	}
}

// TestArtifacts: a failing history is written as JSON lines that read
// back to the same events and the same report, beside porcupine's
// visualization.
func TestArtifacts(t *testing.T) {
	r := NewRecorder()
	ack(r, "p1", "a", 1)
	ack(r, "p2", "b", 0)
	reads(r, "c1", 0, "b", 1, "a")
	events := r.Events()
	rep := Check(events, Options{})
	if rep.OK() {
		t.Fatal("a reordered history passed")
	}
	dir, err := WriteArtifacts(t.TempDir(), events, rep)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSONLines(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, events) {
		t.Fatalf("history read back differs:\n%v\n%v", back, events)
	}
	if again := Check(back, Options{}); again.String() != rep.String() {
		t.Fatalf("the history read back checks differently:\n%s\n%s", again, rep)
	}
	html, err := os.ReadFile(filepath.Join(dir, "linearizability.html"))
	if err != nil || !bytes.Contains(html, []byte(`append \"a\" → 1`)) && !bytes.Contains(html, []byte(`append`)) {
		t.Fatalf("visualization: %v (%d bytes)", err, len(html))
	}
	if report, err := os.ReadFile(filepath.Join(dir, "report.txt")); err != nil || !strings.Contains(string(report), "nonlinearizable: 1") {
		t.Fatalf("report.txt: %v %q", err, report)
	}
}

// TestRecorderConcurrent: clients recording at once get distinct,
// strictly increasing times in index order, and the history checks clean.
func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				op := r.ProduceInvoked(fmt.Sprintf("p%d", p), topic, fmt.Sprintf("p%d-%d", p, i), true)
				r.ProduceFailed(op, kerr.RequestTimedOut, DefiniteFailure(kerr.RequestTimedOut))
			}
		}()
	}
	wg.Wait()
	events := r.Events()
	if len(events) != 4*200*2 {
		t.Fatalf("%d events, want %d", len(events), 4*200*2)
	}
	for i, e := range events {
		if e.Index != i || i > 0 && e.Time <= events[i-1].Time {
			t.Fatalf("event %d: index %d, time %d after %d", i, e.Index, e.Time, events[i-1].Time)
		}
		if e.Type == Fail {
			t.Fatalf("a timeout recorded as a definite failure: %+v", e)
		}
	}
	if rep := Check(events, Options{}); !rep.OK() || rep.Stats.Indefinite != 800 {
		t.Fatalf("%s", rep)
	}
}

func TestDefiniteFailure(t *testing.T) {
	for err, want := range map[error]bool{
		kerr.MessageTooLarge:                          true,
		fmt.Errorf("wrapped: %w", kerr.InvalidRecord): true,
		kerr.NotLeaderForPartition:                    false,
		kerr.RequestTimedOut:                          false,
		context.DeadlineExceeded:                      false,
		errors.New("connection reset by peer"):        false,
	} {
		if got := DefiniteFailure(err); got != want {
			t.Errorf("DefiniteFailure(%v) = %v, want %v", err, got, want)
		}
	}
}
