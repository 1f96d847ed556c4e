package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/proc"
)

// TestEntitiesPassivateAndHandState runs the tree in deterministic mode:
// records for two customers, an idle gap that passivates both, records
// again (respawned with their state), and a flush.
func TestEntitiesPassivateAndHandState(t *testing.T) {
	var journal bytes.Buffer
	rt, err := proc.New(proc.Options{Deterministic: true, Seed: 3, Journal: &journal})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := NewEntities(rt, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	feed := func(recs ...Record) {
		for _, r := range recs {
			if err := ents.Feed(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := rt.RunUntilIdle(); err != nil { // virtual time runs on to the idle timeouts
			t.Fatal(err)
		}
	}
	feed(Record{"a", 1}, Record{"b", 10}, Record{"a", 2})
	if _, ok := rt.Lookup("customer/a"); ok {
		t.Fatal("entity a still alive after its idle timeout")
	}
	if got := ents.router.stored["a"]; got != (entityState{Total: 3, Records: 2}) {
		t.Fatalf("a handed over %+v", got)
	}
	// b fails on the poison record; the record queued behind it in its
	// mailbox dies with it, as in Erlang. The next record respawns b from
	// the state it handed over at its idle timeout.
	feed(Record{"a", 4}, Record{"b", -1}, Record{"b", 100})
	feed(Record{"b", 5})
	report := make(chan map[string]entityState, 1)
	if err := ents.Flush(report); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	totals := <-report
	if totals["a"] != (entityState{Total: 7, Records: 3}) {
		t.Fatalf("a = %+v", totals["a"])
	}
	// 10 (handed over) + 5; the 100 queued behind the poison record is lost.
	if totals["b"] != (entityState{Total: 15, Records: 2}) {
		t.Fatalf("b = %+v", totals["b"])
	}
	if ents.router.failures != 1 || ents.router.spawns != 5 {
		t.Fatalf("failures %d spawns %d, want 1 and 5", ents.router.failures, ents.router.spawns)
	}
	if !strings.Contains(journal.String(), "reason=customer b: negative amount -1") {
		t.Fatalf("journal lacks the failure:\n%s", journal.String())
	}
}

// TestEntitiesOverChannelSource runs the program's real-time path: a channel
// source, Run in the background, a flush at the end.
func TestEntitiesOverChannelSource(t *testing.T) {
	rt, err := proc.New(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := NewEntities(rt, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := contextUntil(stop)
		defer cancel()
		_ = rt.Run(ctx)
	}()
	source := make(chan Record)
	go func() {
		for i := 0; i < 3000; i++ {
			source <- Record{Customer: string(rune('a' + i%7)), Amount: 1}
			if i == 1500 {
				time.Sleep(20 * time.Millisecond) // long enough for every entity to passivate
			}
		}
		close(source)
	}()
	for rec := range source {
		if err := ents.Feed(rec); err != nil {
			t.Fatal(err)
		}
	}
	report := make(chan map[string]entityState, 1)
	if err := ents.Flush(report); err != nil {
		t.Fatal(err)
	}
	var totals map[string]entityState
	select {
	case totals = <-report:
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
	}
	close(stop)
	<-done
	sum := 0
	for _, st := range totals {
		sum += st.Total
	}
	if len(totals) != 7 || sum != 3000 {
		t.Fatalf("%d customers, sum %d; want 7 and 3000", len(totals), sum)
	}
}
