// Package replicatest runs an internal topic's replicated partitions in
// process for the coordinators' tests (internal/group, internal/txn): n
// internal/raftnode Nodes on 127.0.0.1:0 with manual ticks, each holding a
// replica (internal/replica) of every partition on a plog raft log over
// one in-memory filesystem, as internal/replica's own tests do. Nothing
// here is a stand-in: the partitions replicate through raft.
package replicatest

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/coordloop"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/replica"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Cluster is n nodes (raft ids 1..n) holding the partitions of one topic.
type Cluster struct {
	t     testing.TB
	Nodes []*raftnode.Node
	// Parts[i][p] is node i+1's replica of partition p (raft group p+1).
	Parts [][]*replica.Partition

	mu       sync.Mutex
	stopped  []bool
	onLeader []func(p int32, leader, term uint64) // per node, set by OnLeader
}

// Quiet is a logger that discards.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// New starts n nodes with the partitions of topic, none led yet.
func New(t testing.TB, n, partitions int, topic string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, stopped: make([]bool, n), onLeader: make([]func(int32, uint64, uint64), n)}
	fs := vfs.NewMem()
	voters := make([]uint64, n)
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	for i, id := range voters {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		node, err := raftnode.New(raftnode.Config{ID: id, Cluster: 3, Listener: ln, ManualTicks: true, Logger: Quiet})
		if err != nil {
			t.Fatal(err)
		}
		var parts []*replica.Partition
		for p := range partitions {
			cfg := plog.DefaultConfig(fs, fmt.Sprintf("/node%d/%s-%d", id, topic, p))
			cfg.Logger = Quiet
			cfg.SegmentBytes = 16 << 10
			cfg.FileCache = plog.NewFileCache(64)
			part, err := replica.Open(replica.Config{Node: node, Group: uint64(p + 1), Voters: voters, Log: cfg,
				OnLeader: func(leader, term uint64) {
					c.mu.Lock()
					fn := c.onLeader[i]
					c.mu.Unlock()
					if fn != nil {
						fn(int32(p), leader, term)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, part)
		}
		c.Nodes = append(c.Nodes, node)
		c.Parts = append(c.Parts, parts)
	}
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a != b {
				if err := a.AddPeer(b.ID(), b.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, node := range c.Nodes {
		node.Start()
	}
	t.Cleanup(func() {
		for i, node := range c.Nodes {
			node.Stop()
			for _, p := range c.Parts[i] {
				p.Close()
			}
		}
	})
	return c
}

// OnLeader routes node id's leadership reports (replica.Config.OnLeader
// of each partition) to fn: the coordinator's LeaderChanged.
func (c *Cluster) OnLeader(id uint64, fn func(p int32, leader, term uint64)) {
	c.mu.Lock()
	c.onLeader[id-1] = fn
	c.mu.Unlock()
}

// Replicated is what node id's coordinator is given.
func (c *Cluster) Replicated(id uint64) *coordloop.Replicated {
	r := &coordloop.Replicated{Self: id}
	for _, p := range c.Parts[id-1] {
		r.Replicas = append(r.Replicas, p)
	}
	return r
}

// Stop stops node id (its logs stay open for reading).
func (c *Cluster) Stop(id uint64) {
	c.Nodes[id-1].Stop()
	c.mu.Lock()
	c.stopped[id-1] = true
	c.mu.Unlock()
}

// Stopped reports whether node id was stopped.
func (c *Cluster) Stopped(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped[id-1]
}

// Tick is one tick of every live node, then a pause for messages.
func (c *Cluster) Tick() {
	for i, n := range c.Nodes {
		if !c.Stopped(uint64(i + 1)) {
			n.Tick()
		}
	}
	time.Sleep(5 * time.Millisecond)
}

// TickUntil ticks until cond holds, failing after maxTicks.
func (c *Cluster) TickUntil(maxTicks int, what string, cond func() bool) {
	c.t.Helper()
	for i := 0; !cond(); i++ {
		if i == maxTicks {
			c.t.Fatalf("%s: not after %d ticks", what, maxTicks)
		}
		c.Tick()
	}
}

// Ticking ticks every 10 ms in the background until stop is called.
func (c *Cluster) Ticking() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				for i, n := range c.Nodes {
					if !c.Stopped(uint64(i + 1)) {
						n.Tick()
					}
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// Leader is the live node whose replica of partition p takes appends (0:
// none).
func (c *Cluster) Leader(p int32) uint64 {
	for i := range c.Nodes {
		if !c.Stopped(uint64(i+1)) && c.Parts[i][p].Leading() {
			return uint64(i + 1)
		}
	}
	return 0
}

// Elect makes node id the leader of partition p (it campaigns, or the
// leader hands over) and waits until it takes appends.
func (c *Cluster) Elect(id uint64, p int32) {
	c.t.Helper()
	i := 0
	c.TickUntil(300, fmt.Sprintf("node %d leading partition %d", id, p), func() bool {
		if c.Parts[id-1][p].Leading() {
			return true
		}
		if i%20 == 0 {
			if l := c.Leader(p); l != 0 {
				_ = c.Nodes[l-1].TransferLeadership(uint64(p+1), id)
			} else if err := c.Nodes[id-1].Campaign(uint64(p + 1)); err != nil {
				c.t.Fatal(err)
			}
		}
		i++
		return false
	})
}
