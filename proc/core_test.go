package proc

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
)

func mustNew(t testing.TB, opts Options) *Runtime {
	t.Helper()
	rt, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func mustSpawn(t testing.TB, rt *Runtime, name string, b Behaviour, opts SpawnOptions) PID {
	t.Helper()
	pid, err := rt.Spawn(name, b, opts)
	if err != nil {
		t.Fatalf("Spawn(%q): %v", name, err)
	}
	return pid
}

// ball is the preallocated ping-pong message: a pointer, so sending it
// boxes nothing.
type ball struct{ hits int }

// player returns the ball to its sender until the ball has been hit limit
// times.
type player struct{ limit int }

func (p *player) Receive(ctx *Context, m any) error {
	b := m.(*ball)
	b.hits++
	if b.hits >= p.limit {
		return nil
	}
	return ctx.Reply(b)
}

func TestPingPong(t *testing.T) {
	rt := mustNew(t, Options{})
	pl := &player{limit: 1000}
	ping := mustSpawn(t, rt, "ping", pl, SpawnOptions{})
	pong := mustSpawn(t, rt, "pong", pl, SpawnOptions{})
	b := &ball{}
	// Serve from pong: the first delivery comes "from" pong, so ping's
	// reply goes to pong.
	if err := rt.shards[0].deliver(ping, pong, kindMessage, b, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if b.hits != 1000 {
		t.Fatalf("hits = %d, want 1000", b.hits)
	}
	if st := rt.Stats(); st.Delivered != 1000 || st.Live != 2 {
		t.Fatalf("stats = %+v, want 1000 delivered, 2 live", st)
	}
}

func TestStalePIDNeverReachesReusedSlot(t *testing.T) {
	rt := mustNew(t, Options{})
	var got []any
	first := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error { ctx.Stop(); return nil }), SpawnOptions{})
	if err := rt.Send(first, "bye"); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	second := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error { got = append(got, m); return nil }), SpawnOptions{})
	if second.Index != first.Index || second.Generation == first.Generation {
		t.Fatalf("slot not reused under a new generation: first %v second %v", first, second)
	}
	if err := rt.Send(first, "stale"); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("send to stale PID: %v, want ErrNoProcess", err)
	}
	if err := rt.Send(second, "fresh"); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "fresh" {
		t.Fatalf("second process got %v, want only [fresh]", got)
	}
	if rt.Alive(first) || !rt.Alive(second) {
		t.Fatal("Alive disagrees with generations")
	}
}

func TestNames(t *testing.T) {
	rt := mustNew(t, Options{})
	var got []string
	rec := BehaviourFunc(func(ctx *Context, m any) error {
		got = append(got, m.(string))
		if m == "stop" {
			ctx.Stop()
		}
		return nil
	})
	pid := mustSpawn(t, rt, "counter", rec, SpawnOptions{})
	if _, err := rt.Spawn("counter", rec, SpawnOptions{}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("second spawn under a taken name: %v, want ErrNameTaken", err)
	}
	if p, ok := rt.Lookup("counter"); !ok || p != pid {
		t.Fatalf("Lookup = %v %v, want %v", p, ok, pid)
	}
	for _, m := range []string{"a", "b", "stop"} {
		if err := rt.SendName("counter", m); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b,stop" {
		t.Fatalf("got %v", got)
	}
	if _, ok := rt.Lookup("counter"); ok {
		t.Fatal("name still registered after exit")
	}
	if err := rt.SendName("counter", "x"); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("SendName after exit: %v", err)
	}
	// The name is free again.
	mustSpawn(t, rt, "counter", rec, SpawnOptions{})
}

func TestEmptyMailboxHoldsNoBuffer(t *testing.T) {
	rt := mustNew(t, Options{})
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { return nil }), SpawnOptions{})
	s := rt.shards[0]
	p := s.lookup(pid)
	if p.tail != nil || p.extra != nil {
		t.Fatal("a fresh process holds a mailbox buffer or an extra block")
	}
	for i := 0; i < 10; i++ {
		if err := rt.Send(pid, i); err != nil {
			t.Fatal(err)
		}
	}
	if p.mailboxLen != 10 || s.usedBytes != processBytes+10*nodeBytes {
		t.Fatalf("mailboxLen %d usedBytes %d", p.mailboxLen, s.usedBytes)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if p.tail != nil || p.mailboxLen != 0 || s.usedBytes != processBytes {
		t.Fatalf("drained mailbox still holds nodes: len %d usedBytes %d", p.mailboxLen, s.usedBytes)
	}
}

func TestProcessStructSize(t *testing.T) {
	// The idle cost target is 300 B per process including its name entry;
	// the struct is the part the runtime controls.
	if processBytes > 64 {
		t.Fatalf("process struct is %d bytes, keep it within one 64-byte cache line", processBytes)
	}
}

func TestReadyRingFIFOAndTake(t *testing.T) {
	var r readyRing
	for i := 1; i <= 40; i++ { // grows past 16 and 32 with a wrapped head
		r.push(PID{Index: uint32(i), Generation: 1})
		if i%3 == 0 {
			if got := r.take(0); got.Index != uint32(i/3) {
				t.Fatalf("take(0) = %v, want index %d", got, i/3)
			}
		}
	}
	if r.count != 40-13 {
		t.Fatalf("count %d", r.count)
	}
	// take(k) returns the k-th element and puts the head in its place.
	want := r.buf[(r.head+5)&(len(r.buf)-1)]
	head := r.buf[r.head]
	if got := r.take(5); got != want {
		t.Fatalf("take(5) = %v, want %v", got, want)
	}
	if got := r.buf[(r.head+4)&(len(r.buf)-1)]; got != head {
		t.Fatalf("the old head moved to %v, want it at offset 4", got)
	}
}

func TestFIFOOrderAcrossProcesses(t *testing.T) {
	rt := mustNew(t, Options{MessagesPerTurn: 1})
	var order []int
	pids := make([]PID, 3)
	for i := range pids {
		i := i
		pids[i] = mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { order = append(order, i); return nil }), SpawnOptions{})
	}
	for round := 0; round < 2; round++ {
		for _, p := range []int{2, 0, 1} {
			if err := rt.Send(pids[p], round); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if got := fmtInts(order); got != "2,0,1,2,0,1" {
		t.Fatalf("order %v, want ready order 2 0 1 2 0 1", order)
	}
}

func fmtInts(v []int) string {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte(byte('0' + x))
	}
	return b.String()
}

func TestHandlerErrorAndPanicExit(t *testing.T) {
	var journal bytes.Buffer
	rt := mustNew(t, Options{Journal: &journal})
	boom := errors.New("boom")
	a := mustSpawn(t, rt, "a", BehaviourFunc(func(*Context, any) error { return boom }), SpawnOptions{})
	b := mustSpawn(t, rt, "b", BehaviourFunc(func(*Context, any) error { panic("oops") }), SpawnOptions{})
	after := 0
	c := mustSpawn(t, rt, "c", BehaviourFunc(func(*Context, any) error { after++; return nil }), SpawnOptions{})
	_ = rt.Send(a, 1)
	_ = rt.Send(b, 1)
	_ = rt.Send(c, 1) // runs after the panic, in the same batch of turns
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if after != 1 {
		t.Fatal("the scheduler stopped running processes after a panic")
	}
	got := journal.String()
	for _, line := range []string{"exit <0.1> reason=boom", "exit <1.1> reason=proc: handler panicked: oops"} {
		if !strings.Contains(got, line) {
			t.Fatalf("journal lacks %q:\n%s", line, got)
		}
	}
	if rt.Stats().Live != 1 {
		t.Fatal("failed processes still live")
	}
}

func TestSendAfterOnInjectedClock(t *testing.T) {
	mc := clock.NewManual(time.Unix(1000, 0))
	rt := mustNew(t, Options{Clock: mc})
	var got []any
	var timer Timer
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		got = append(got, m)
		switch m {
		case "start":
			ctx.SendAfter(ctx.Self(), "late", 2*time.Second)
			timer = ctx.SendAfter(ctx.Self(), "cancelled", time.Second)
			ctx.SendAfter(ctx.Self(), "early", time.Second)
		case "cancel":
			if !ctx.CancelTimer(timer) {
				return errors.New("cancel of a pending timer failed")
			}
			if ctx.CancelTimer(timer) {
				return errors.New("second cancel succeeded")
			}
		}
		return nil
	}), SpawnOptions{})
	_ = rt.Send(pid, "start")
	_ = rt.Send(pid, "cancel")
	s := rt.shards[0]
	// Not running: step the loop by hand, so no goroutine races the clock.
	for s.ready.count > 0 {
		s.runTurn()
	}
	if n := s.fireTimers(s.nowNanos()); n != 0 {
		t.Fatalf("%d timers fired before their time", n)
	}
	mc.Advance(time.Second)
	s.fireTimers(s.nowNanos())
	for s.ready.count > 0 {
		s.runTurn()
	}
	mc.Advance(time.Second)
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	want := []any{"start", "cancel", "early", "late"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRealClockTimerWakesRun(t *testing.T) {
	rt := mustNew(t, Options{})
	fired := make(chan struct{})
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		if m == "arm" {
			ctx.SendAfter(ctx.Self(), "fire", 5*time.Millisecond)
			return nil
		}
		close(fired)
		ctx.Stop()
		return nil
	}), SpawnOptions{})
	_ = rt.Send(pid, "arm")
	start := time.Now()
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	default:
		t.Fatal("RunUntilIdle returned before the pending timer fired")
	}
	if time.Since(start) < 5*time.Millisecond {
		t.Fatal("timer fired early")
	}
}

func TestReceiveTimeout(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	var got []string
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		switch m.(type) {
		case Timeout:
			got = append(got, "timeout@"+ctx.Now().Sub(defaultVirtualStart).String())
			ctx.Stop()
		default:
			got = append(got, m.(string)+"@"+ctx.Now().Sub(defaultVirtualStart).String())
			if m == "start" {
				ctx.SetReceiveTimeout(10 * time.Second)
				ctx.SendAfter(ctx.Self(), "ping", 7*time.Second)
			}
		}
		return nil
	}), SpawnOptions{})
	_ = rt.Send(pid, "start")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	// The ping at 7s resets the idle clock: the timeout comes at 17s, not 10s.
	if want := "start@0s,ping@7s,timeout@17s"; strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestRunStopsOnContext(t *testing.T) {
	rt := mustNew(t, Options{})
	ctx, cancel := contextWithTimeout(20 * time.Millisecond)
	defer cancel()
	if err := rt.Run(ctx); err == nil {
		t.Fatal("Run returned nil after its context expired")
	}
}

// TestIdleShardDropsBurstNodes: the nodes of a burst of queued messages are
// let go when the runtime goes idle, so per-process memory after work
// returns to the idle figure; a small free list is kept.
func TestIdleShardDropsBurstNodes(t *testing.T) {
	rt := mustNew(t, Options{})
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { return nil }), SpawnOptions{})
	s := rt.shards[0]
	for i := 0; i < 10*keepFreeNodes; i++ {
		_ = rt.Send(pid, i)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if s.freeNodes != nil || s.freeNodeCount != 0 {
		t.Fatalf("%d free nodes kept after a burst of %d", s.freeNodeCount, 10*keepFreeNodes)
	}
	for i := 0; i < 10; i++ {
		_ = rt.Send(pid, i)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if s.freeNodeCount != nodeSlabSize {
		t.Fatalf("%d free nodes after a small batch, want one slab (%d) kept", s.freeNodeCount, nodeSlabSize)
	}
}
