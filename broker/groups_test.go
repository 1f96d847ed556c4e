package broker

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func groupProduce(t *testing.T, tb *testBroker, topic string, partitions, n int, prefix string) {
	t.Helper()
	cl := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: fmt.Appendf(nil, "%s%d", prefix, i)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// consumeGroup consumes with a group member until it has n records or the
// deadline passes, committing what it polled.
func consumeGroup(t *testing.T, tb *testBroker, group, topic string, n int, opts ...kgo.Opt) []string {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	}, opts...)
	cl := tb.client(opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group %s: %d of %d records before the deadline", group, len(got), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close() // leaves the group
	return got
}

// TestGroupConsumeCommitRestartResume: a kgo group consumer reads and
// commits, the broker restarts, and a new member of the group resumes from
// the committed offsets.
func TestGroupConsumeCommitRestartResume(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, Config{DataDir: dir, DefaultPartitions: 3})
	admin := kadm.NewClient(tb.client())
	if _, err := admin.CreateTopic(context.Background(), 3, 1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	groupProduce(t, tb, "events", 3, 30, "first-")
	if got := consumeGroup(t, tb, "g", "events", 30); len(got) != 30 {
		t.Fatalf("first run: %d records", len(got))
	}
	tb.stop()

	tb = startBroker(t, Config{DataDir: dir})
	admin = kadm.NewClient(tb.client())
	offsets, err := admin.FetchOffsets(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		o, ok := offsets.Lookup("events", p)
		if !ok || o.At != 10 {
			t.Fatalf("after restart: committed offset of events/%d is %+v (ok %v), want 10", p, o, ok)
		}
	}
	groupProduce(t, tb, "events", 3, 6, "second-")
	got := consumeGroup(t, tb, "g", "events", 6)
	sort.Strings(got)
	if len(got) != 6 || got[0] != "second-0" || got[5] != "second-5" {
		t.Fatalf("resumed run read %v, want the 6 new records", got)
	}

	// __consumer_offsets is an internal topic in Metadata.
	md := kmsg.NewPtrMetadataRequest()
	resp, err := md.RequestWith(context.Background(), tb.client())
	if err != nil {
		t.Fatal(err)
	}
	var internal bool
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == "__consumer_offsets" {
			internal = t.IsInternal
		}
	}
	if !internal {
		t.Fatal("__consumer_offsets is not listed as an internal topic")
	}
}

// TestGroupTwoConsumersSplitPartitions: two members of one group share the
// partitions, and together read every record once.
func TestGroupTwoConsumersSplitPartitions(t *testing.T) {
	tb := startBroker(t, Config{})
	admin := kadm.NewClient(tb.client())
	if _, err := admin.CreateTopic(context.Background(), 4, 1, nil, "split"); err != nil {
		t.Fatal(err)
	}
	groupProduce(t, tb, "split", 4, 400, "v")

	var mu sync.Mutex
	assigned := map[int][]int32{}
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	clients := make([]*kgo.Client, 2)
	for i := range clients {
		clients[i] = tb.client(
			kgo.ConsumerGroup("split-group"), kgo.ConsumeTopics("split"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.Balancers(kgo.RangeBalancer()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				assigned[i] = m["split"]
				mu.Unlock()
			}),
		)
	}
	// Each member counts what it reads; the test ends when every record
	// was read and both members hold partitions.
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++ })
				mu.Unlock()
			}
		}()
	}
	for ctx.Err() == nil {
		mu.Lock()
		done := len(seen) == 400 && len(assigned[0]) > 0 && len(assigned[1]) > 0
		mu.Unlock()
		if done {
			cancel()
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	if len(seen) != 400 {
		t.Fatalf("the group read %d distinct records, want 400", len(seen))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(assigned[0])+len(assigned[1]) != 4 {
		t.Fatalf("assignments %v do not split the 4 partitions", assigned)
	}
	t.Logf("assignments: %v", assigned)
}

// TestGroupKIP848TwoConsumers: franz-go's KIP-848 mode (the broker
// assigns): two members of one group split the partitions and read every
// record once; the group is listed as a "consumer" (KIP-848) group.
func TestGroupKIP848TwoConsumers(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, Config{DataDir: dir})
	admin := kadm.NewClient(tb.client())
	if _, err := admin.CreateTopic(context.Background(), 4, 1, nil, "next-gen"); err != nil {
		t.Fatal(err)
	}
	groupProduce(t, tb, "next-gen", 4, 200, "v")

	var mu sync.Mutex
	seen := map[string]int{}
	assigned := map[int]map[string][]int32{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 {
		cl := tb.client(
			kgo.ConsumerGroup("kip848"), kgo.ConsumeTopics("next-gen"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				if assigned[i] == nil {
					assigned[i] = map[string][]int32{}
				}
				assigned[i]["next-gen"] = append(assigned[i]["next-gen"], m["next-gen"]...)
				mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				var keep []int32
				for _, p := range assigned[i]["next-gen"] {
					if !slicesContains(m["next-gen"], p) {
						keep = append(keep, p)
					}
				}
				if assigned[i] != nil {
					assigned[i]["next-gen"] = keep
				}
				mu.Unlock()
			}),
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++ })
				mu.Unlock()
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl.CommitUncommittedOffsets(cctx)
			ccancel()
		}()
	}
	for ctx.Err() == nil {
		mu.Lock()
		done := len(seen) == 200 && len(assigned[0]["next-gen"]) > 0 && len(assigned[1]["next-gen"]) > 0
		mu.Unlock()
		if done {
			cancel()
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer lcancel()
	listed, err := admin.ListGroups(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := listed["kip848"]; !ok || g.GroupType != "consumer" {
		t.Fatalf("group kip848 listed as %+v, want a consumer (KIP-848) group", listed["kip848"])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 200 {
		t.Fatalf("the group read %d distinct records, want 200", len(seen))
	}
	if len(assigned[0]["next-gen"])+len(assigned[1]["next-gen"]) != 4 || len(assigned[0]["next-gen"]) == 0 || len(assigned[1]["next-gen"]) == 0 {
		t.Fatalf("assignments %v do not split the 4 partitions", assigned)
	}
	t.Logf("assignments: %v", assigned)
}

func slicesContains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
