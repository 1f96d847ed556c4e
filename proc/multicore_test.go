package proc

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// The order-insensitive program of the multi-core test: producers send
// increments to counters by name; every counter, told to report, sends its
// total to the collector; links and monitors cross threads too (each
// counter is monitored by the collector and a temporary helper linked to it
// exits normally).
type counterProc struct {
	name  string
	total int
}

type increment struct{ by int }

type report struct{}

func (c *counterProc) Receive(ctx *Context, m any) error {
	switch m := m.(type) {
	case increment:
		c.total += m.by
	case report:
		ctx.Stop()
		return ctx.SendName("collector", c.name+"="+strconv.Itoa(c.total))
	}
	return nil
}

type producerProc struct {
	id, keys, rounds int
}

func (p *producerProc) Receive(ctx *Context, m any) error {
	for r := 0; r < p.rounds; r++ {
		for k := 0; k < p.keys; k++ {
			if err := ctx.SendName("k"+strconv.Itoa(k), increment{by: p.id*r + k}); err != nil {
				return err
			}
		}
	}
	// A helper, spawned and linked (on any thread), that exits normally.
	helper, err := ctx.Spawn("", BehaviourFunc(func(ctx *Context, _ any) error { ctx.Stop(); return nil }), SpawnOptions{Link: true, Spread: true})
	if err != nil {
		return err
	}
	ctx.Stop()
	return ctx.Send(helper, "bye")
}

type collectorProc struct {
	totals map[string]bool
	downs  int
}

func (c *collectorProc) Receive(ctx *Context, m any) error {
	switch m := m.(type) {
	case string:
		c.totals[m] = true
	case Down:
		c.downs++
	case []PID:
		for _, p := range m {
			ctx.Monitor(p)
		}
	}
	return nil
}

// runCounters runs the program and returns what the collector saw.
func runCounters(t *testing.T, opts Options) (map[string]bool, int) {
	t.Helper()
	const keys, producers, rounds = 200, 8, 50
	rt := mustNew(t, opts)
	col := &collectorProc{totals: map[string]bool{}}
	colPID := mustSpawn(t, rt, "collector", col, SpawnOptions{})
	var counters []PID
	for k := 0; k < keys; k++ {
		counters = append(counters, mustSpawn(t, rt, "k"+strconv.Itoa(k), &counterProc{name: "k" + strconv.Itoa(k)}, SpawnOptions{}))
	}
	_ = rt.Send(colPID, counters)
	for p := 0; p < producers; p++ {
		pid := mustSpawn(t, rt, "", &producerProc{id: p, keys: keys, rounds: rounds}, SpawnOptions{})
		_ = rt.Send(pid, "go")
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	for _, c := range counters {
		_ = rt.Send(c, report{})
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if got := rt.Stats().Live; got != 1 {
		t.Fatalf("%d processes alive at the end, want only the collector", got)
	}
	return col.totals, col.downs
}

// TestMultiCoreSameResultsAsDeterministic: for an order-insensitive program
// the multi-core mode's observable results equal deterministic mode's, for
// any seed and any number of threads.
func TestMultiCoreSameResultsAsDeterministic(t *testing.T) {
	want, wantDowns := runCounters(t, Options{Deterministic: true, Seed: 1})
	if len(want) != 200 || wantDowns != 200 {
		t.Fatalf("deterministic run: %d totals, %d downs", len(want), wantDowns)
	}
	for _, opts := range []Options{
		{Deterministic: true, Seed: 99},
		{},
		{Schedulers: 2},
		{Schedulers: 4},
		{Schedulers: 3, MessagesPerTurn: 1},
	} {
		for round := 0; round < 3; round++ {
			got, downs := runCounters(t, opts)
			if fmt.Sprint(got) != fmt.Sprint(want) || downs != wantDowns {
				t.Fatalf("options %+v round %d: results differ from deterministic mode (%d totals, %d downs)", opts, round, len(got), downs)
			}
		}
	}
}

func TestMultiCoreRunStopsOnContext(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		ctx.SendAfter(ctx.Self(), m, time.Millisecond) // forever busy with timers
		return nil
	}), SpawnOptions{})
	_ = rt.Send(pid, "tick")
	ctx, cancel := contextWithTimeout(30 * time.Millisecond)
	defer cancel()
	if err := rt.Run(ctx); err == nil {
		t.Fatal("Run returned nil")
	}
}

func TestMultiCoreKillAcrossThreads(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	var victims []PID
	for i := 0; i < 4; i++ { // round-robin placement: two per thread
		victims = append(victims, mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { return nil }), SpawnOptions{}))
	}
	killer := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		for _, v := range victims {
			ctx.Kill(v, nil)
		}
		return nil
	}), SpawnOptions{})
	_ = rt.Send(killer, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	for _, v := range victims {
		if rt.Alive(v) {
			t.Fatalf("%v survived Kill from another thread", v)
		}
	}
}

func TestDeterministicRejectsSchedulers(t *testing.T) {
	if _, err := New(Options{Deterministic: true, Schedulers: 2}); err == nil {
		t.Fatal("deterministic mode with two threads accepted")
	}
}

// TestMultiCoreLinksAndMonitorsAcrossThreads: a link and a monitor between
// processes on different threads deliver Exit and Down.
func TestMultiCoreLinksAndMonitorsAcrossThreads(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	got := make(chan string, 4)
	// Round-robin placement from outside: victim and watcher land on
	// different threads.
	victim := mustSpawn(t, rt, "victim", &recorder{}, SpawnOptions{})
	watcher := mustSpawn(t, rt, "watcher", BehaviourFunc(func(ctx *Context, m any) error {
		switch m := m.(type) {
		case string:
			ctx.Link(victim)
			ctx.Monitor(victim)
			return ctx.Send(victim, "crash")
		case Exit:
			got <- "exit " + reasonText(m.Reason)
		case Down:
			got <- "down " + reasonText(m.Reason)
		}
		return nil
	}), SpawnOptions{TrapExit: true})
	if victim.Index%2 == watcher.Index%2 {
		t.Fatalf("victim %v and watcher %v on the same thread", victim, watcher)
	}
	_ = rt.Send(watcher, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	close(got)
	var all []string
	for s := range got {
		all = append(all, s)
	}
	if fmt.Sprint(all) != "[exit crashed down crashed]" && fmt.Sprint(all) != "[down crashed exit crashed]" {
		t.Fatalf("watcher got %v", all)
	}
}

// TestMultiCoreMonitorRequestQueuedAtExit: a monitor and a link requested
// from another thread, still queued behind the message on which the target
// exits, are answered (not lost with the rest of its mailbox).
func TestMultiCoreMonitorRequestQueuedAtExit(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	target := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	got := make(chan string, 2)
	watcher := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		switch m := m.(type) {
		case Down:
			got <- "down " + reasonText(m.Reason)
		case Exit:
			got <- "exit " + reasonText(m.Reason)
		}
		return nil
	}), SpawnOptions{TrapExit: true})
	if target.Index%2 == watcher.Index%2 {
		t.Fatal("target and watcher on the same thread")
	}
	// Lay out the target's mailbox by hand (nothing runs yet): the crash,
	// then the watcher's link and monitor requests, as they would arrive
	// from the watcher's thread.
	ts, ws := rt.shards[target.Index%2], rt.shards[watcher.Index%2]
	addLink(ws.lookup(watcher), target)
	_ = ts.deliver(target, PID{}, kindMessage, "crash", 0)
	_ = ts.deliver(target, watcher, kindLink, nil, 0)
	_ = ts.deliver(target, watcher, kindMonitor, nil, 77)
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	close(got)
	var all []string
	for g := range got {
		all = append(all, g)
	}
	if fmt.Sprint(all) != "[exit crashed down crashed]" && fmt.Sprint(all) != "[down crashed exit crashed]" {
		t.Fatalf("the watcher got %v, want the Exit and the Down of the crash", all)
	}
}

// TestMultiCoreMaxProcesses: threads spawning at once never pass the limit
// together.
func TestMultiCoreMaxProcesses(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2, MaxProcesses: 50})
	refused := make(chan int, 2)
	for i := 0; i < 2; i++ {
		mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
			n := 0
			for j := 0; j < 100; j++ {
				if _, err := ctx.Spawn("", &recorder{}, SpawnOptions{}); err != nil {
					n++
				}
			}
			refused <- n
			return nil
		}), SpawnOptions{})
	}
	for i := uint32(0); i < 2; i++ {
		_ = rt.Send(PID{Index: i, Generation: 1}, "go")
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if live := rt.Stats().Live; live != 50 {
		t.Fatalf("%d live, limit 50", live)
	}
	if got := <-refused + <-refused; got != 200-48 {
		t.Fatalf("%d spawns refused, want %d", got, 200-48)
	}
}

// TestSpreadSpawn: with Spread, processes spawned by one process start on
// every thread; a failure to start reaches the linked spawner as Exit.
func TestSpreadSpawn(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	threads := map[uint32]int{}
	var exits []string
	spawner := mustSpawn(t, rt, "spawner", BehaviourFunc(func(ctx *Context, m any) error {
		switch m := m.(type) {
		case string:
			for i := 0; i < 100; i++ {
				pid, err := ctx.Spawn("", &recorder{}, SpawnOptions{Spread: true})
				if err != nil {
					return err
				}
				threads[pid.Index%2]++
			}
			// Two spread spawns under one name: one of them cannot start.
			for i := 0; i < 2; i++ {
				if _, err := ctx.Spawn("twin", &recorder{}, SpawnOptions{Spread: true, Link: true}); err != nil {
					return err
				}
			}
		case Exit:
			exits = append(exits, reasonText(m.Reason))
		}
		return nil
	}), SpawnOptions{TrapExit: true})
	_ = rt.Send(spawner, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if threads[0] < 40 || threads[1] < 40 {
		t.Fatalf("spread spawns landed on threads %v", threads)
	}
	if got := rt.Stats().Live; got != 1+100+1 {
		t.Fatalf("%d live, want %d", got, 1+100+1)
	}
	if fmt.Sprint(exits) != "["+ErrNameTaken.Error()+"]" {
		t.Fatalf("spawner got exits %v, want one ErrNameTaken", exits)
	}
}

// TestMultiCoreSpreadEntitiesLoseNothing: entities spread over threads
// count every routed message.
func TestMultiCoreSpreadEntitiesLoseNothing(t *testing.T) {
	rt := mustNew(t, Options{Schedulers: 2})
	router := mustSpawn(t, rt, "", NewEntities(EntityOptions{New: newTally, IdleTimeout: time.Millisecond, Spread: true}), SpawnOptions{})
	want := 0
	driver := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		for i := 0; i < 2000; i++ {
			want += i % 7
			ctx.SendAfter(router, Routed{Key: strconv.Itoa(i % 13), Message: i % 7}, time.Duration(i%5)*time.Millisecond)
		}
		return nil
	}), SpawnOptions{})
	_ = rt.Send(driver, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	done := make(chan map[string]any, 1)
	_ = rt.Send(router, PassivateAll{Done: func(s map[string]any) { done <- s }})
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, s := range <-done {
		got += s.([2]int)[0]
	}
	if got != want {
		t.Fatalf("states sum to %d, %d was routed", got, want)
	}
}
