package raftnode

import (
	"sync"
	"sync/atomic"
)

// Scheduling states of a group, under scheduler.mu.
const (
	schedQueued  = 1 << 0 // in the queue, or to be queued again when its run ends
	schedRunning = 1 << 1 // a worker is processing it
)

// scheduler runs the groups that have work on a fixed pool of workers:
// CockroachDB's raftScheduler in small. A group is in the queue at most once
// and processed by at most one worker at a time, so a group's Readys are
// handled in order and its RawNode needs no lock: whoever runs it owns it.
// Work arriving while it runs marks it queued, and it goes back to the end of
// the queue when the run ends (fair between groups).
type scheduler struct {
	mu      sync.Mutex
	cond    sync.Cond
	queue   []*group // FIFO from head
	head    int
	started bool
	stopped bool
	running atomic.Int32 // groups being processed
	wg      sync.WaitGroup
}

func (s *scheduler) start(workers int) {
	s.cond.L = &s.mu
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	for range workers {
		s.wg.Add(1)
		go s.worker()
	}
}

// workersRun says whether the workers run (started, not stopped).
func (s *scheduler) workersRun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started && !s.stopped
}

// enqueue asks for g to be processed.
func (s *scheduler) enqueue(g *group) {
	s.mu.Lock()
	if g.sched&schedQueued == 0 {
		g.sched |= schedQueued
		if g.sched&schedRunning == 0 {
			s.queue = append(s.queue, g)
			s.cond.Signal()
		}
	}
	s.mu.Unlock()
}

func (s *scheduler) worker() {
	defer s.wg.Done()
	s.mu.Lock()
	for {
		for s.head == len(s.queue) && !s.stopped {
			s.cond.Wait()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		g := s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		if s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
		} else if s.head > 1024 && s.head > len(s.queue)/2 {
			n := copy(s.queue, s.queue[s.head:])
			clear(s.queue[n:])
			s.queue, s.head = s.queue[:n], 0
		}
		g.sched = schedRunning
		s.running.Add(1)
		s.mu.Unlock()

		g.process()

		s.mu.Lock()
		s.running.Add(-1)
		g.sched &^= schedRunning
		if g.sched&schedQueued != 0 {
			s.queue = append(s.queue, g)
			s.cond.Signal()
		}
	}
}

// stop ends the workers once the groups they are processing are done; what
// is still queued is not processed.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}
