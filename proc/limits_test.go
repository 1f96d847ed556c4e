package proc

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestMaxProcesses(t *testing.T) {
	rt := mustNew(t, Options{MaxProcesses: 3})
	idle := BehaviourFunc(func(*Context, any) error { return nil })
	var pids []PID
	for i := 0; i < 3; i++ {
		pids = append(pids, mustSpawn(t, rt, "", idle, SpawnOptions{}))
	}
	_, err := rt.Spawn("", idle, SpawnOptions{})
	if !errors.Is(err, ErrTooManyProcesses) {
		t.Fatalf("fourth spawn: %v, want ErrTooManyProcesses", err)
	}
	if err.Error() != "proc: process limit reached (Options.MaxProcesses); spawn refused" {
		t.Fatalf("message %q", err)
	}
	// The refusal costs nothing: no allocation, so it works with no memory left.
	if a := testing.AllocsPerRun(100, func() { _, _ = rt.Spawn("", idle, SpawnOptions{}) }); a != 0 {
		t.Fatalf("refused spawn allocates %.1f times", a)
	}
	rt.Kill(pids[0], nil)
	mustSpawn(t, rt, "", idle, SpawnOptions{}) // room again
}

func TestMemoryBudget(t *testing.T) {
	budget := int64(10*processBytes + 20*nodeBytes)
	rt := mustNew(t, Options{MemoryBudgetBytes: budget})
	idle := BehaviourFunc(func(*Context, any) error { return nil })
	var pids []PID
	for {
		pid, err := rt.Spawn("", idle, SpawnOptions{})
		if err != nil {
			if !errors.Is(err, ErrMemoryBudget) {
				t.Fatalf("spawn past the budget: %v", err)
			}
			break
		}
		pids = append(pids, pid)
	}
	if len(pids) != 30 { // 10 processes + 20 nodes' worth of bytes, all spent on processes
		if int64(len(pids))*processBytes > budget || int64(len(pids)+1)*processBytes <= budget {
			t.Fatalf("%d processes fit a budget of %d bytes at %d each", len(pids), budget, processBytes)
		}
	}
	for len(pids) > 5 { // free room for exactly some messages
		rt.Kill(pids[len(pids)-1], nil)
		pids = pids[:len(pids)-1]
	}
	sent := 0
	var err error
	for ; sent < 10_000; sent++ {
		if err = rt.Send(pids[0], &ball{}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrMemoryBudget) || sent == 0 {
		t.Fatalf("after %d messages: %v, want ErrMemoryBudget", sent, err)
	}
	msg := &ball{}
	if a := testing.AllocsPerRun(100, func() { _ = rt.Send(pids[0], msg) }); a != 0 {
		t.Fatalf("refused send allocates %.1f times", a)
	}
	if used := rt.Stats().UsedBytes; used > budget {
		t.Fatalf("used %d bytes, over the budget of %d", used, budget)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if used, want := rt.Stats().UsedBytes, 5*processBytes; used != want {
		t.Fatalf("after draining: used %d bytes, want %d (messages give their bytes back)", used, want)
	}
}

type sized struct{ n int }

func (s sized) SizeBytes() int { return s.n }

func TestMemoryBudgetCountsSizer(t *testing.T) {
	rt := mustNew(t, Options{MemoryBudgetBytes: processBytes + nodeBytes + 1000})
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { return nil }), SpawnOptions{})
	if err := rt.Send(pid, sized{1000}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Send(pid, sized{1}); !errors.Is(err, ErrMemoryBudget) {
		t.Fatalf("second message: %v, want ErrMemoryBudget", err)
	}
}

func TestBoundedMailboxErrorAndDrop(t *testing.T) {
	rt := mustNew(t, Options{})
	idle := BehaviourFunc(func(*Context, any) error { return nil })
	strict := mustSpawn(t, rt, "", idle, SpawnOptions{MailboxLimit: 2, MailboxFull: MailboxError})
	lossy := mustSpawn(t, rt, "", idle, SpawnOptions{MailboxLimit: 2, MailboxFull: MailboxDrop})
	for i := 0; i < 2; i++ {
		if err := rt.Send(strict, i); err != nil {
			t.Fatal(err)
		}
		if err := rt.Send(lossy, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Send(strict, 2); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("third message to a full MailboxError mailbox: %v", err)
	}
	if err := rt.Send(lossy, 2); err != nil {
		t.Fatalf("third message to a full MailboxDrop mailbox: %v", err)
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if st := rt.Stats(); st.Dropped != 1 || st.Delivered != 4 {
		t.Fatalf("stats %+v, want 1 dropped, 4 delivered", st)
	}
	// System signals bypass the bound: a full mailbox still takes an exit.
	for i := 0; i < 2; i++ {
		_ = rt.Send(strict, i)
	}
	if _, err := rt.Spawn("", idle, SpawnOptions{MailboxLimit: -1}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("negative limit: %v", err)
	}
}

// TestBoundedMailboxBlock: a sender outside the runtime waits while a
// MailboxBlock mailbox is full, so what is buffered for the process (its
// mailbox, the messages parked for it, the outside queue) stays within
// MailboxLimit + OutsideQueueLimit; every message arrives, in order.
func TestBoundedMailboxBlock(t *testing.T) {
	const outsideLimit = 4
	rt := mustNew(t, Options{MessagesPerTurn: 1, OutsideQueueLimit: outsideLimit})
	var mu sync.Mutex
	var got []int
	var maxLen uint32
	maxParked := 0
	sink := BehaviourFunc(func(ctx *Context, m any) error {
		mu.Lock()
		if l := ctx.proc.mailboxLen; l > maxLen {
			maxLen = l
		}
		if l := len(ctx.proc.extra.parked); l > maxParked {
			maxParked = l
		}
		got = append(got, m.(int))
		mu.Unlock()
		time.Sleep(50 * time.Microsecond) // a slow reader
		return nil
	})
	sinkPID := mustSpawn(t, rt, "", sink, SpawnOptions{MailboxLimit: 4, MailboxFull: MailboxBlock})
	stop := startRun(rt)
	const total = 300
	for i := 0; i < total; i++ {
		if err := rt.Send(sinkPID, i); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == total || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if len(got) != total {
		t.Fatalf("%d of %d messages arrived", len(got), total)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: order lost", i, v)
		}
	}
	if maxLen > 4 {
		t.Fatalf("mailbox held %d messages, limit 4", maxLen)
	}
	// Parked messages came through the outside queue; the one sender can
	// add one more that passed its room check before the mark was set.
	if maxParked > outsideLimit+1 {
		t.Fatalf("%d messages parked, more than the outside queue could hold (%d) plus one", maxParked, outsideLimit)
	}
	if rt.Stats().SenderWaits == 0 {
		t.Fatal("the sender never waited: 300 messages into a mailbox of 4 read slowly")
	}
}

// TestOutsideQueueLimit: outside senders wait when the scheduler thread is
// busy and the outside queue is full, instead of growing it without bound.
func TestOutsideQueueLimit(t *testing.T) {
	rt := mustNew(t, Options{OutsideQueueLimit: 8})
	release := make(chan struct{})
	var count int
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		if m == "hold" {
			<-release
		}
		count++
		return nil
	}), SpawnOptions{})
	stop := startRun(rt)
	_ = rt.Send(pid, "hold")
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			_ = rt.Send(pid, i)
		}
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("100 sends finished into an outside queue of 8 while the thread was held")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	stop()
	if err := rt.RunUntilIdle(); err != nil { // what was still queued when Run stopped
		t.Fatal(err)
	}
	if count != 101 {
		t.Fatalf("%d messages handled, want 101", count)
	}
	if rt.Stats().SenderWaits == 0 {
		t.Fatal("no sender wait counted")
	}
}

// TestBoundedMailboxBlockInsideRuntime: a process that fills a MailboxBlock
// mailbox finishes its callback and then gets no turn until there is room;
// nothing is lost or reordered, and the mailbox never exceeds its bound.
func TestBoundedMailboxBlockInsideRuntime(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true, Seed: 4, MessagesPerTurn: 1})
	var got []int
	var maxLen uint32
	consumer := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		if l := ctx.proc.mailboxLen; l > maxLen {
			maxLen = l
		}
		got = append(got, m.(int))
		return nil
	}), SpawnOptions{MailboxLimit: 2, MailboxFull: MailboxBlock})
	next := 0
	producerTurns := 0
	producer := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		producerTurns++
		for i := 0; i < 10 && next < 100; i++ { // a burst of 10 per turn into a mailbox of 2
			if err := ctx.Send(consumer, next); err != nil {
				return err
			}
			next++
		}
		if next < 100 {
			return ctx.Send(ctx.Self(), "more")
		}
		return nil
	}), SpawnOptions{})
	_ = rt.Send(producer, "more")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("%d of 100 messages arrived", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: order lost", i, v)
		}
	}
	if maxLen > 2 {
		t.Fatalf("mailbox held %d, bound 2", maxLen)
	}
	if w := rt.Stats().SenderWaits; w < 9 {
		t.Fatalf("producer blocked %d times, want at least 9 (one per burst)", w)
	}
	if !rt.Alive(producer) || producerTurns != 10 {
		t.Fatalf("producer alive %v after %d turns, want 10", rt.Alive(producer), producerTurns)
	}
}
