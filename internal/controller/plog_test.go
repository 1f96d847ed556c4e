package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestOnDurablePlogStorage runs the quorum as the broker does (cluster
// mode): three nodes on plog.RaftStorage, raft on its own ticker. A broker
// registers and a topic is created through the active controller, then
// every node stops and restarts on its reopened storage: the replay gives
// each node the topic and its assignments again.
//
// Fails (every proposal waits until its deadline) when waiters are keyed by
// the whole proposed batch: the storage stamps the base offset and the
// leader epoch into the entry's bytes, so the applied entry never matches.
func TestOnDurablePlogStorage(t *testing.T) {
	fs := vfs.NewMem()
	dir := func(id int32) string { return fmt.Sprintf("/n%d/__cluster_metadata-0", id) }
	type node struct {
		rn      *raftnode.Node
		ctl     *Controller
		storage *plog.RaftStorage
	}
	start := func() ([]node, func()) {
		var nodes []node
		for id := range int32(3) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			rn, err := raftnode.New(raftnode.Config{ID: RaftID(id), Cluster: 14, Listener: ln, TickInterval: 20 * time.Millisecond, Logger: quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			cfg := plog.DefaultConfig(fs, dir(id))
			cfg.Logger, cfg.RetentionTime = quietLogger, -1
			storage, err := plog.OpenRaftStorage(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctl, err := New(Config{Node: id, Voters: []int32{0, 1, 2}, Raft: rn, Storage: storage, Logger: quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, node{rn, ctl, storage})
		}
		for i, n := range nodes {
			for j, p := range nodes {
				if i != j {
					if err := n.rn.AddPeer(p.rn.ID(), p.rn.Addr()); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, n := range nodes {
			n.rn.Start()
			wg.Add(1)
			go func() { defer wg.Done(); n.ctl.Run(ctx, 20*time.Millisecond) }()
		}
		return nodes, func() {
			cancel()
			wg.Wait()
			for _, n := range nodes {
				n.rn.Stop()
				if err := n.storage.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	}
	// onActive calls f on the active controller until it is not
	// NOT_CONTROLLER (leadership may move), within 10 s.
	onActive := func(nodes []node, f func(ctx context.Context, c *Controller) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			err := meta.ErrNotController
			for _, n := range nodes {
				if n.ctl.Active() {
					err = f(ctx, n.ctl)
					break
				}
			}
			if !errors.Is(err, meta.ErrNotController) {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("no active controller answered within 10 s: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	nodes, stop := start()
	onActive(nodes, func(ctx context.Context, c *Controller) error {
		return c.RegisterBroker(ctx, Registration{ID: 0, Incarnation: NewIncarnation()})
	})
	onActive(nodes, func(ctx context.Context, c *Controller) error {
		_, err := c.Heartbeat(ctx, 0, c.Machine().Brokers()[0].Incarnation, c.Applied())
		return err
	})
	onActive(nodes, func(ctx context.Context, c *Controller) error {
		_, _, err := c.CreateTopic(ctx, "durable", 3, 1, nil)
		return err
	})
	stop()

	nodes, stop = start()
	defer stop()
	for _, n := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			topic, ok := n.ctl.Machine().Topic("durable")
			if ok {
				if rs := n.ctl.Machine().Replicas(topic.ID); len(rs) != 3 || len(rs[2]) != 1 || rs[2][0] != 0 {
					t.Fatalf("node %d replayed the replicas %v, want 3 partitions on broker 0", n.ctl.cfg.Node, rs)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: the topic is not back 10 s after the restart", n.ctl.cfg.Node)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
