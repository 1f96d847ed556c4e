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
// again (respawned with their state), a poison record, and a flush.
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
	feed(Record{"a", 4}, Record{"b", -1}) // a respawns from 3; b fails on the poison record
	feed(Record{"b", 5})                  // b respawns from its hand-over (10)
	report := make(chan map[string]counterState, 1)
	if err := ents.Flush(report); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	totals := <-report
	if totals["a"] != (counterState{Total: 7, Records: 3}) || totals["b"] != (counterState{Total: 15, Records: 2}) {
		t.Fatalf("totals %+v", totals)
	}
	j := journal.String()
	if n := strings.Count(j, "name=customer/"); n != 5 {
		t.Fatalf("%d entity spawns, want 5 (a, b, a, b, b):\n%s", n, j)
	}
	if !strings.Contains(j, "reason=customer b: negative amount -1") {
		t.Fatalf("journal lacks the failure:\n%s", j)
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
	report := make(chan map[string]counterState, 1)
	if err := ents.Flush(report); err != nil {
		t.Fatal(err)
	}
	var totals map[string]counterState
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
