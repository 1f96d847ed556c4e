package replica

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/vfs"
)

// group is the partition's raft group in these tests.
const group = 1

// testCluster is three (or n) in-process nodes on 127.0.0.1 with manual
// ticks, each holding one replica of a partition on a plog raft log over
// one in-memory filesystem (a directory per node).
type testCluster struct {
	t       testing.TB
	nodes   []*raftnode.Node // nodes[i] has id i+1
	parts   []*Partition
	stopped []bool
	configs []Config // each replica's, to restart it

	mu      sync.Mutex
	leaders map[uint64][]uint64 // node → the leaders OnLeader reported, in order
}

func newCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, stopped: make([]bool, n), leaders: make(map[uint64][]uint64)}
	fs := vfs.NewMem()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	voters := make([]uint64, n)
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	for _, id := range voters {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		node, err := raftnode.New(raftnode.Config{ID: id, Cluster: 3, Listener: ln, ManualTicks: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		cfg := plog.DefaultConfig(fs, fmt.Sprintf("/node%d/topic-0", id))
		cfg.Logger = quiet
		cfg.SegmentBytes = 8 << 10 // several segments: rolls under the entries
		cfg.FileCache = plog.NewFileCache(64)
		pc := Config{Node: node, Group: group, Voters: voters, Log: cfg, OnLeader: func(leader, _ uint64) {
			c.mu.Lock()
			c.leaders[id] = append(c.leaders[id], leader)
			c.mu.Unlock()
		}}
		p, err := Open(pc)
		if err != nil {
			t.Fatal(err)
		}
		c.configs = append(c.configs, pc)
		c.nodes = append(c.nodes, node)
		c.parts = append(c.parts, p)
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				if err := a.AddPeer(b.ID(), b.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, node := range c.nodes {
		node.Start()
	}
	t.Cleanup(func() {
		for i, node := range c.nodes {
			node.Stop()
			c.parts[i].Close()
		}
	})
	return c
}

func (c *testCluster) part(id uint64) *Partition { return c.parts[id-1] }

// stop stops node id (its partition's log stays open, for reading).
func (c *testCluster) stop(id uint64) {
	c.nodes[id-1].Stop()
	c.mu.Lock()
	c.stopped[id-1] = true
	c.mu.Unlock()
}

// restart makes stopped node id again, as a restarted process: a new node
// (a new peer address, which its peers redial) and the partition reopened
// from its files.
func (c *testCluster) restart(id uint64) {
	c.t.Helper()
	if err := c.parts[id-1].Close(); err != nil {
		c.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	pc := c.configs[id-1]
	node, err := raftnode.New(raftnode.Config{ID: id, Cluster: 3, Listener: ln, ManualTicks: true, Logger: pc.Log.Logger})
	if err != nil {
		c.t.Fatal(err)
	}
	pc.Node = node
	p, err := Open(pc)
	if err != nil {
		c.t.Fatal(err)
	}
	for i, peer := range c.nodes {
		if uint64(i+1) == id || c.isStopped(i) {
			continue
		}
		if err := node.AddPeer(peer.ID(), peer.Addr()); err != nil {
			c.t.Fatal(err)
		}
		if err := peer.AddPeer(id, node.Addr()); err != nil {
			c.t.Fatal(err)
		}
	}
	node.Start()
	c.mu.Lock()
	c.nodes[id-1], c.parts[id-1], c.configs[id-1], c.stopped[id-1] = node, p, pc, false
	c.mu.Unlock()
}

func (c *testCluster) isStopped(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped[i]
}

// cut cuts node id off from the others, both ways (or heals it).
func (c *testCluster) cut(id uint64, cut bool) {
	for _, n := range c.nodes {
		if n.ID() != id {
			n.CutPeer(id, cut)
			c.nodes[id-1].CutPeer(n.ID(), cut)
		}
	}
}

// tick is one tick of every live node, then a pause for messages to travel.
func (c *testCluster) tick() {
	for i, n := range c.nodes {
		if !c.isStopped(i) {
			n.Tick()
		}
	}
	time.Sleep(5 * time.Millisecond)
}

// tickUntil ticks until cond holds, failing after maxTicks.
func (c *testCluster) tickUntil(maxTicks int, what string, cond func() bool) {
	c.t.Helper()
	for i := 0; !cond(); i++ {
		if i == maxTicks {
			c.t.Fatalf("%s: not after %d ticks", what, maxTicks)
		}
		c.tick()
	}
}

// ticking ticks in the background until the returned function is called.
func (c *testCluster) ticking() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond): // elections in ~100 ms
				for i, n := range c.nodes {
					if !c.isStopped(i) {
						n.Tick()
					}
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// leader is the live replica that takes appends (0: none yet).
func (c *testCluster) leader() uint64 {
	for i, p := range c.parts {
		if !c.isStopped(i) && p.Leading() {
			return uint64(i + 1)
		}
	}
	return 0
}

// elect makes node id the leader (it campaigns; a leader elected before it
// hands over) and waits until it takes appends.
func (c *testCluster) elect(id uint64) {
	c.t.Helper()
	i := 0
	c.tickUntil(200, fmt.Sprintf("node %d leading", id), func() bool {
		if c.part(id).Leading() {
			return true
		}
		if i%20 == 0 {
			if l := c.leader(); l != 0 {
				_ = c.nodes[l-1].TransferLeadership(group, id)
			} else if err := c.nodes[id-1].Campaign(group); err != nil {
				c.t.Fatal(err)
			}
		}
		i++
		return false
	})
}

// awaitLeader waits until some live replica takes appends.
func (c *testCluster) awaitLeader(maxTicks int) uint64 {
	c.t.Helper()
	c.tickUntil(maxTicks, "a leader", func() bool { return c.leader() != 0 })
	return c.leader()
}

// awaitHWM waits until every live replica's high watermark is at least hwm.
func (c *testCluster) awaitHWM(hwm int64) {
	c.t.Helper()
	c.tickUntil(200, fmt.Sprintf("high watermark %d everywhere", hwm), func() bool {
		for i, p := range c.parts {
			if !c.isStopped(i) && p.Log().HighWatermark() < hwm {
				return false
			}
		}
		return true
	})
}

// record is one batch read back from a log.
type record struct {
	offset   int64
	value    string
	producer int64
	seq      int32
	raw      []byte // the whole batch as stored
}

// readAll reads every data batch of l below its high watermark, checking
// that none ends past it.
func readAll(t testing.TB, l *plog.Log) []record {
	t.Helper()
	var out []record
	hwm := l.HighWatermark()
	for from := l.LogStartOffset(); from < hwm; {
		res, err := l.Read(from, 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Chunks) == 0 {
			res.Release()
			t.Fatalf("no chunk at %d below the high watermark %d", from, hwm)
		}
		for _, ch := range res.Chunks {
			buf := make([]byte, ch.Len)
			if _, err := ch.File.ReadAt(buf, ch.Pos); err != nil {
				t.Fatal(err)
			}
			for len(buf) > 0 {
				h, err := batch.ParseHeader(buf)
				if err != nil {
					t.Fatal(err)
				}
				b := buf[:h.Size()]
				if h.LastOffset() >= res.HighWatermark {
					t.Fatalf("read a batch ending at %d past the high watermark %d", h.LastOffset(), res.HighWatermark)
				}
				if !h.Control() {
					var v string
					if err := batch.ForEachKeyValue(b, func(_ int32, _, value []byte) error { v = string(value); return nil }); err != nil {
						t.Fatal(err)
					}
					out = append(out, record{offset: h.BaseOffset, value: v, producer: h.ProducerID, seq: h.BaseSequence, raw: bytes.Clone(b)})
				}
				from = h.LastOffset() + 1
				buf = buf[h.Size():]
			}
		}
		res.Release()
	}
	return out
}

// errHung is an append not answered within appendTimeout.
var errHung = errors.New("append not answered within the timeout")

// appendTimeout stands for the broker's request timeout in these tests:
// an append is always answered well within it.
const appendTimeout = 10 * time.Second

// appendWithin is l.Append, bounded by appendTimeout (errHung: the append
// goroutine is left waiting).
func appendWithin(l *plog.Log, b []byte, ack plog.AckPolicy) (plog.AppendResult, error) {
	type answer struct {
		res plog.AppendResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := l.Append(b, ack)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-time.After(appendTimeout):
		return plog.AppendResult{BaseOffset: -1}, errHung
	}
}

// value is a batch of one record holding v (not idempotent).
func value(v string) []byte {
	return batch.BuildRecords([]batch.KeyValue{{Value: []byte(v)}}, 0, time.Now().UnixMilli())
}

// idempotent is a batch of one record from producer id, epoch 0, at
// sequence seq.
func idempotent(id int64, seq int32) []byte {
	return batch.Build(batch.BuildOptions{ProducerID: id, BaseSequence: seq, ValueSize: 8, BaseTimestamp: time.Now().UnixMilli()})
}
