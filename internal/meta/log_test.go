package meta

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

var topics100k = flag.Bool("meta.100k", false, "also create 100,000 topics in TestCatalogScalesLinearly")

// smallOptions compact after a few KiB, so tests cross many snapshots.
var smallOptions = options{minCompactBytes: 2 << 10, reserveBytes: 4 << 10}

// model is what the catalogue should hold: topic name -> "partitions|configs".
type model map[string]string

func (m model) clone() model {
	out := model{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func describe(c *Catalog) model {
	m := model{}
	for _, t := range c.Topics() {
		var cfg []string
		for k, v := range t.Configs {
			cfg = append(cfg, k+"="+v)
		}
		sort.Strings(cfg)
		m[t.Name] = fmt.Sprintf("%d|%s", t.Partitions, strings.Join(cfg, ","))
	}
	return m
}

func (m model) String() string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%s ", k, m[k])
	}
	return b.String()
}

// step applies the i-th change of a deterministic workload of creations,
// growths, config changes and deletions to c and to m.
func step(t *testing.T, c *Catalog, m model, i int) {
	t.Helper()
	name := fmt.Sprintf("t%d", i)
	switch {
	case i%7 == 3 && len(m) > 0:
		victim := fmt.Sprintf("t%d", i-3)
		if _, ok := m[victim]; ok {
			if err := c.DeleteTopic(victim); err != nil {
				t.Fatalf("change %d: delete %s: %v", i, victim, err)
			}
			delete(m, victim)
			return
		}
	case i%5 == 4:
		target := fmt.Sprintf("t%d", i-1)
		if _, ok := m[target]; ok {
			if err := c.SetPartitions(target, 4); err != nil {
				t.Fatalf("change %d: grow %s: %v", i, target, err)
			}
			m[target] = "4" + m[target][1:]
			return
		}
	case i%11 == 5:
		target := fmt.Sprintf("t%d", i-2)
		if _, ok := m[target]; ok {
			cfg := map[string]string{"retention.ms": fmt.Sprint(i)}
			if err := c.SetConfigs(target, cfg); err != nil {
				t.Fatalf("change %d: configs %s: %v", i, target, err)
			}
			m[target] = m[target][:strings.Index(m[target], "|")+1] + fmt.Sprintf("retention.ms=%d", i)
			return
		}
	}
	if _, err := c.CreateTopic(name, 1, nil); err != nil {
		t.Fatalf("change %d: create %s: %v", i, name, err)
	}
	m[name] = "1|"
}

// TestCatalogReplayAcrossSnapshots: a workload crossing many snapshots
// reads back exactly, reopened after every change batch, and the log stays
// small.
func TestCatalogReplayAcrossSnapshots(t *testing.T) {
	fs := vfs.NewMem()
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	m := model{}
	var pids []int64
	for i := 0; i < 600; i++ {
		step(t, c, m, i)
		if i%3 == 0 {
			id, err := c.NextProducerID()
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, id)
		}
		if i%97 == 0 {
			c.Close()
			if c, err = open(fs, "/meta", smallOptions); err != nil {
				t.Fatalf("reopen after change %d: %v", i, err)
			}
			if got := describe(c); got.String() != m.String() {
				t.Fatalf("after change %d:\n got %v\nwant %v", i, got, m)
			}
		}
	}
	c.Close()
	c, err = open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := describe(c); got.String() != m.String() {
		t.Fatalf("got %v\nwant %v", got, m)
	}
	id, _ := c.NextProducerID()
	for _, p := range pids {
		if id <= p {
			t.Fatalf("producer id %d handed out again", id)
		}
	}
	d, err := vfs.ReadFile(fs, "/meta/"+snapshotFile)
	if err != nil || !strings.Contains(string(d), `"next_offset":`) || strings.Contains(string(d), `"next_offset":0,`) {
		t.Fatalf("no snapshot beyond offset 0 was taken: %.200s %v", d, err)
	}
	if fi, _ := fs.Stat("/meta/" + logFile); fi.Size() > 8*smallOptions.minCompactBytes {
		t.Fatalf("log of %d bytes: not compacted", fi.Size())
	}
}

// TestCatalogTornTail: the log cut at any byte of its last commit, or
// followed by garbage, opens with the changes before it, and the next
// change lands after them.
func TestCatalogTornTail(t *testing.T) {
	fs := vfs.NewMem()
	c, err := open(fs, "/meta", options{minCompactBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := c.CreateTopic(fmt.Sprintf("t%d", i), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := c.logSize
	if _, err := c.CreateTopic("last", 1, nil); err != nil {
		t.Fatal(err)
	}
	after := c.logSize
	c.Close()
	check := func(t *testing.T, disk *vfs.MemFS, wantLast bool) {
		t.Helper()
		c, err := open(disk, "/meta", options{minCompactBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Topic("last"); ok != wantLast {
			t.Fatalf("topic last present: %v, want %v", ok, wantLast)
		}
		if _, ok := c.Topic("t4"); !ok {
			t.Fatal("acknowledged topic t4 lost")
		}
		if _, err := c.CreateTopic("next", 1, nil); err != nil {
			t.Fatal(err)
		}
		c.Close()
		c, err = open(disk, "/meta", options{minCompactBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.Topic("next"); !ok {
			t.Fatal("the change after the truncated tail was lost")
		}
	}
	for cut := before; cut < after; cut++ {
		t.Run(fmt.Sprintf("cut%d", cut), func(t *testing.T) {
			disk := fs.Crash(nil)
			f, _ := disk.OpenReadWrite("/meta/" + logFile)
			f.Truncate(cut)
			f.Close()
			check(t, disk, false)
		})
	}
	t.Run("garbage", func(t *testing.T) {
		disk := fs.Crash(nil)
		f, _ := disk.OpenReadWrite("/meta/" + logFile)
		f.Write(make([]byte, 100))
		f.Write([]byte("not a batch at all, just bytes"))
		f.Close()
		check(t, disk, true)
	})
	t.Run("corrupt-middle", func(t *testing.T) {
		disk := fs.Crash(nil)
		f, _ := disk.OpenReadWrite("/meta/" + logFile)
		f.WriteAt([]byte{0xff}, before-3) // in the batch before the last
		f.Close()
		if _, err := open(disk, "/meta", options{minCompactBytes: 1 << 30}); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("damage followed by an intact batch opened: %v", err)
		}
	})
	t.Run("flipped", func(t *testing.T) {
		disk := fs.Crash(nil)
		f, _ := disk.OpenReadWrite("/meta/" + logFile)
		f.WriteAt([]byte{0xff}, after-3)
		f.Close()
		check(t, disk, false)
	})
}

// TestCatalogCrash: a crash at every sync point of a workload that takes
// many snapshots recovers to the state after the last acknowledged change
// or after the change in flight, never anything else.
func TestCatalogCrash(t *testing.T) {
	fs := vfs.NewMem()
	rng := rand.New(rand.NewPCG(8, 8))
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	type point struct {
		disk  *vfs.MemFS
		acked int // changes acknowledged when the sync began
	}
	var (
		mu     sync.Mutex
		points []point
		acked  int
	)
	fs.SetSyncHook(func(vfs.Op, string) {
		mu.Lock()
		points = append(points, point{fs.Crash(rng), acked})
		mu.Unlock()
	})
	m := model{}
	states := []model{m.clone()} // states[i]: after i changes
	const changes = 300
	for i := 0; i < changes; i++ {
		step(t, c, m, i)
		states = append(states, m.clone())
		mu.Lock()
		acked++
		mu.Unlock()
	}
	fs.SetSyncHook(nil)
	c.Close()
	snapshots := 0
	for i, p := range points {
		c, err := open(p.disk, "/meta", smallOptions)
		if err != nil {
			t.Fatalf("crash point %d (after %d changes): %v", i, p.acked, err)
		}
		got := describe(c).String()
		if got != states[p.acked].String() && (p.acked == changes || got != states[p.acked+1].String()) {
			t.Fatalf("crash point %d after %d acknowledged changes:\n got %s\nwant %s", i, p.acked, got, states[p.acked])
		}
		if c.nextOffset > int64(p.acked+1) {
			t.Fatalf("crash point %d: %d records for %d changes", i, c.nextOffset, p.acked)
		}
		if d, _ := vfs.ReadFile(p.disk, "/meta/"+snapshotFile); !strings.Contains(string(d), `"next_offset":0,`) {
			snapshots++
		}
		c.Close()
	}
	if snapshots < len(points)/2 {
		t.Fatalf("only %d of %d crash points had a snapshot past offset 0", snapshots, len(points))
	}
	t.Logf("%d crash points", len(points))
}

// legacyCatalog is a catalog.json as earlier versions wrote it.
const legacyCatalog = `{
  "version": 1,
  "topics": [
    {"name": "orders", "id": "0123456789abcdef0123456789abcdef", "partitions": 3, "configs": {"retention.ms": "1000"}},
    {"name": "plain", "id": "fedcba9876543210fedcba9876543210", "partitions": 1}
  ],
  "producer_id_block_end": 5000,
  "cluster_id": "legacy-cluster-id"
}`

func writeLegacy(t *testing.T, fs vfs.FS) {
	t.Helper()
	fs.MkdirAll("/meta", 0o755)
	f, err := fs.Create("/meta/" + legacyCatalogFile)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(legacyCatalog))
	f.Sync()
	f.Close()
	fs.SyncDir("/meta")
	fs.SyncDir("/")
}

func checkLegacy(t *testing.T, c *Catalog) {
	t.Helper()
	if got, want := describe(c).String(), "orders:3|retention.ms=1000 plain:1| "; got != want {
		t.Fatalf("migrated catalogue %q, want %q", got, want)
	}
	if o, _ := c.Topic("orders"); fmt.Sprintf("%x", o.ID) != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("topic id %x", o.ID)
	}
	if c.ClusterID() != "legacy-cluster-id" {
		t.Fatalf("cluster id %q", c.ClusterID())
	}
	if id, err := c.NextProducerID(); err != nil || id < 5000 {
		t.Fatalf("producer id %d (%v) below the legacy block end", id, err)
	}
}

// TestCatalogMigratesLegacy: a data directory with the old catalog.json
// opens with its topics, cluster ID and producer-id block, and keeps them
// once catalog.json is gone; a crash at any point of the migration too.
func TestCatalogMigratesLegacy(t *testing.T) {
	fs := vfs.NewMem()
	writeLegacy(t, fs)
	var points []*vfs.MemFS
	rng := rand.New(rand.NewPCG(3, 3))
	fs.SetSyncHook(func(vfs.Op, string) { points = append(points, fs.Crash(rng)) })
	c, err := Open(fs, "/meta")
	fs.SetSyncHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLegacy(t, c)
	c.Close()
	if _, err := fs.Stat("/meta/" + legacyCatalogFile); err == nil {
		t.Fatal("catalog.json still there after the migration")
	}
	c, err = Open(fs, "/meta")
	if err != nil {
		t.Fatal(err)
	}
	checkLegacy(t, c)
	c.Close()
	for i, disk := range points {
		c, err := Open(disk, "/meta")
		if err != nil {
			t.Fatalf("crash point %d of the migration: %v", i, err)
		}
		checkLegacy(t, c)
		c.Close()
	}
	t.Logf("%d crash points during the migration", len(points))
}

// TestCatalogScalesLinearly: creating 20,000 topics takes time linear in
// the count: the last 5,000 take at most 3 times as long as the first
// 5,000 (a catalogue rewritten on every change takes about 7 times as
// long). -meta.100k also creates 100,000.
func TestCatalogScalesLinearly(t *testing.T) {
	total := 20000
	if *topics100k {
		total = 100000
	}
	fs := vfs.NewMem()
	c, err := Open(fs, "/meta")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const block = 5000
	// The process's CPU time, not the wall clock: on a loaded machine a
	// block's wall time included the time others ran (it failed once with
	// other packages' tests running).
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var blocks []time.Duration
	start := cpu()
	for i := 0; i < total; i++ {
		if _, err := c.CreateTopic(fmt.Sprintf("topic-%06d", i), 1, nil); err != nil {
			t.Fatal(err)
		}
		if (i+1)%block == 0 {
			now := cpu()
			blocks = append(blocks, now-start)
			start = now
		}
	}
	first, last := blocks[0], blocks[len(blocks)-1]
	t.Logf("%d topics: first %d in %v (%v/topic), last %d in %v (%v/topic)", total, block, first, first/block, block, last, last/block)
	if last > 3*first+50*time.Millisecond {
		t.Fatalf("the last %d topics took %v, the first %d %v: not linear", block, last, block, first)
	}
	if c.PartitionCount() != int64(total) {
		t.Fatalf("partition count %d", c.PartitionCount())
	}
}

// TestCatalogFullDisk: on a full disk, changes (a deletion first of all)
// still commit by taking the reserve, are durable, and the reserve comes
// back once there is room.
func TestCatalogFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	disk := vfs.NewFullFS(mem, 1<<30)
	c, err := open(disk, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := c.CreateTopic(fmt.Sprintf("t%d", i), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	disk.SetCapacity(disk.Used()) // full
	var images []*vfs.MemFS
	rng := rand.New(rand.NewPCG(4, 4))
	mem.SetSyncHook(func(vfs.Op, string) { images = append(images, mem.Crash(rng)) })
	if err := c.DeleteTopic("t3"); err != nil {
		t.Fatalf("delete on a full disk: %v", err)
	}
	mem.SetSyncHook(nil)
	// A crash at any sync point of it (the reserve's removal, the record)
	// keeps the other topics, and t3 once the delete returned.
	for i, image := range images {
		ic, err := open(image, "/meta", smallOptions)
		if err != nil {
			t.Fatalf("crash point %d: %v", i, err)
		}
		if n := len(ic.Topics()); n < 9 || n > 10 {
			t.Fatalf("crash point %d: %d topics", i, n)
		}
		if _, ok := ic.Topic("t3"); ok && i == len(images)-1 {
			t.Fatalf("crash point %d, after the delete's fsync: t3 is back", i)
		}
		ic.Close()
	}
	if len(images) == 0 {
		t.Fatal("no sync point")
	}
	if _, err := mem.Stat("/meta/" + reserveFile); err == nil {
		t.Fatal("the reserve was not used")
	}
	for i := 0; i < 20; i++ {
		if err := c.DeleteTopic(fmt.Sprintf("t%d", i%10)); err != nil && !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("more deletions: %v", err)
		}
	}
	// The reserve is spent: a change now fails cleanly, and is not in
	// the state.
	var failed error
	for i := 0; i < 1000 && failed == nil; i++ {
		_, failed = c.CreateTopic(fmt.Sprintf("x%d", i), 1, nil)
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("a full disk without reserve: %v", failed)
	}
	want := describe(c)
	disk.SetCapacity(1 << 30) // space is back
	if _, err := c.CreateTopic("after", 1, nil); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	want["after"] = "1|"
	c.Close()
	c, err = open(mem.Crash(nil), "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := describe(c); got.String() != want.String() {
		t.Fatalf("after reopen:\n got %v\nwant %v", got, want)
	}
	_ = filepath.Join
}

// TestCatalogGroupCommit: concurrent changes share fsyncs, every one is
// durable, and producer ids stay unique across a restart.
func TestCatalogGroupCommit(t *testing.T) {
	fs := vfs.NewMem()
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 100
	syncsBefore := fs.SyncCount()
	var wg sync.WaitGroup
	ids := make(chan int64, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := c.CreateTopic(fmt.Sprintf("w%d-%d", w, i), 1, nil); err != nil {
					t.Error(err)
					return
				}
				id, err := c.NextProducerID()
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		}()
	}
	wg.Wait()
	close(ids)
	syncs := fs.SyncCount() - syncsBefore
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("producer id %d handed out twice", id)
		}
		seen[id] = true
	}
	t.Logf("%d changes, %d syncs", workers*each, syncs)
	c.Close()
	c, err = open(fs.Crash(nil), "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.Topics()); n != workers*each {
		t.Fatalf("%d topics after reopen, want %d", n, workers*each)
	}
	id, _ := c.NextProducerID()
	if seen[id] {
		t.Fatalf("producer id %d handed out again after the restart", id)
	}
}

// TestCatalogSyncFailureIsSticky: a failed fsync of the log fails the
// change, takes it out of the state (nothing claims what may not be
// durable), refuses later changes until a restart, and the failed change
// does not come back at the restart.
func TestCatalogSyncFailureIsSticky(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, path string) error {
		if failing.Load() && op == vfs.OpSync && strings.HasSuffix(path, logFile) {
			failing.Store(false) // once: the error is what must stick
			return vfs.ErrInjected
		}
		return nil
	}))
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic("before", 1, nil); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	if _, err := c.CreateTopic("failed", 1, nil); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("create with a failing fsync: %v", err)
	}
	if _, ok := c.Topic("failed"); ok {
		t.Fatal("the failed topic is in the state")
	}
	if _, err := c.CreateTopic("later", 1, nil); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("a change after a failed fsync: %v", err)
	}
	if _, ok := c.Topic("before"); !ok {
		t.Fatal("an acknowledged topic is gone")
	}
	c.Close()
	// Whatever a crash keeps of the unsynced bytes, the failed change is
	// not among them: the log was cut back to its durable size.
	for seed := uint64(0); seed < 20; seed++ {
		c, err = open(mem.Crash(rand.New(rand.NewPCG(seed, seed))), "/meta", smallOptions)
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(c).String(); got != "before:1| " {
			t.Fatalf("after restart (seed %d): %q", seed, got)
		}
		if _, err := c.CreateTopic("later", 1, nil); err != nil {
			t.Fatalf("after restart: %v", err)
		}
		c.Close()
	}
}
