package history

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// syntheticHistory is a clean run of perPartition records in each of
// partitions partitions: two producers, each with batches of 16 records
// in flight acknowledged together, and two consumers reading every
// record soon after it is appended, some before its acknowledgement.
func syntheticHistory(partitions, perPartition int) []Event {
	r := NewRecorder()
	type inFlight struct {
		op    int64
		at    pos
		value string
	}
	next := make([]int64, partitions)
	var batch []inFlight
	for i := 0; i < partitions*perPartition; i++ {
		p := int32(i % partitions)
		process := fmt.Sprintf("p%d", i%2+1)
		value := fmt.Sprintf("%s-%d", process, i)
		op := r.ProduceInvoked(process, topic, value, true)
		batch = append(batch, inFlight{op, pos{topic, p, next[p]}, value})
		next[p]++
		if len(batch) < 32 && i != partitions*perPartition-1 {
			continue
		}
		// The broker appends the batch; the consumers see half of it
		// before the producers hear back.
		half := len(batch) / 2
		for _, f := range batch[:half] {
			r.Polled("c1", topic, f.at.partition, f.at.offset, f.value)
			r.Polled("c2", topic, f.at.partition, f.at.offset, f.value)
		}
		for _, f := range batch {
			r.ProduceAcked(f.op, f.at.partition, f.at.offset)
		}
		for _, f := range batch[half:] {
			r.Polled("c1", topic, f.at.partition, f.at.offset, f.value)
			r.Polled("c2", topic, f.at.partition, f.at.offset, f.value)
		}
		batch = batch[:0]
	}
	for p := range partitions {
		end := r.EndOffsetsInvoked("c1", topic)
		r.EndOffset(end, "c1", topic, int32(p), next[p])
	}
	return r.Events()
}

// TestLinearizableScale: porcupine checks a test-sized history in well
// under its timeout; the time per size is logged (see docs/architecture.md,
// "The history checker").
func TestLinearizableScale(t *testing.T) {
	for _, n := range []int{1000, 5000} {
		events := syntheticHistory(3, n)
		start := time.Now()
		rep := Check(events, Options{})
		took := time.Since(start)
		if !rep.OK() || rep.Linearizable != porcupine.Ok {
			t.Fatalf("%d records a partition: %s", n, rep)
		}
		t.Logf("%d records in each of 3 partitions (%d linearizability ops): checked in %s", n, rep.Stats.LinearizableOps, took)
	}
}
