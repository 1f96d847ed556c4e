package diskprobe

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	dir := t.TempDir()
	volatile, err := IsVolatile(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Probe(context.Background(), dir, Options{WriteBytes: 8 << 20, SyncIterations: 50, AllowVolatile: volatile})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.String())
	t.Log(r.Raw())
	if r.WriteBytes != 8<<20 || r.ReadBytes != 8<<20 {
		t.Errorf("wrote %d B, read %d B; want 8 MiB each", r.WriteBytes, r.ReadBytes)
	}
	if r.SyncCount != 50 {
		t.Errorf("SyncCount = %d, want 50", r.SyncCount)
	}
	// The flush loops: each default size, bounded by the write size (8
	// appends of 1 MiB allowed, raised to the minimum of 10).
	wantCounts := map[int64]int{64 << 10: 50, 256 << 10: 32, 1 << 20: 10}
	if len(r.Flushes) != len(DefaultFlushSizes) {
		t.Fatalf("%d flush loops, want %d: %+v", len(r.Flushes), len(DefaultFlushSizes), r.Flushes)
	}
	for i, f := range r.Flushes {
		if f.Bytes != DefaultFlushSizes[i] || f.Count != wantCounts[f.Bytes] {
			t.Errorf("flush loop %d: %d appends of %d B, want %d of %d", i, f.Count, f.Bytes, wantCounts[DefaultFlushSizes[i]], DefaultFlushSizes[i])
		}
		if !(f.P50 > 0 && f.P50 <= f.P90 && f.P90 <= f.P99 && f.P99 <= f.Max) || f.Total <= 0 {
			t.Errorf("flush loop of %d B: %+v", f.Bytes, f)
		}
		if got, ok := r.Flush(f.Bytes); !ok || got != f {
			t.Errorf("Flush(%d) = %+v, %v", f.Bytes, got, ok)
		}
	}
	if !strings.Contains(r.String(), "; fdatasync 1MiB p50 ") || !strings.Contains(r.Raw(), "appends of 1048576 B + fdatasync") {
		t.Errorf("the flush loops are not reported:\n%s\n%s", r.String(), r.Raw())
	}
	if r.WriteDuration <= 0 || r.ReadDuration <= 0 || r.SyncTotal <= 0 || r.WriteSync <= 0 {
		t.Errorf("non-positive duration: %s", r.Raw())
	}
	if !(r.SyncLatencyP50 > 0 && r.SyncLatencyP50 <= r.SyncLatencyP90 &&
		r.SyncLatencyP90 <= r.SyncLatencyP99 && r.SyncLatencyP99 <= r.SyncLatencyMax) {
		t.Errorf("percentiles out of order: %v %v %v %v", r.SyncLatencyP50, r.SyncLatencyP90, r.SyncLatencyP99, r.SyncLatencyMax)
	}
	if r.WriteBandwidth() <= 0 || r.ReadBandwidth() <= 0 {
		t.Errorf("bandwidth %v / %v", r.WriteBandwidth(), r.ReadBandwidth())
	}
	if r.ResidentBeforeRead < 0 || r.ResidentBeforeRead > 1 {
		t.Errorf("ResidentBeforeRead = %v", r.ResidentBeforeRead)
	}
	if !volatile && len(r.Suspect) > 0 {
		// A shared CI disk can be slow, never impossibly fast.
		t.Errorf("suspect figures on a real disk: %q", r.Suspect)
	}
	if volatile && len(r.Suspect) == 0 {
		t.Error("a tmpfs run is not labelled suspect")
	}
	line := r.String()
	for _, want := range []string{"# disk: ", r.Storage.FSType + " on ", "seq write ", "fdatasync 4KiB p50 ", " p99 ", "seq read "} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("probe files left behind: %v", left)
	}
}

func TestProbeCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Probe(ctx, dir, Options{WriteBytes: 4 << 20, SyncIterations: 5, AllowVolatile: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe with a cancelled context: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("probe files left behind: %v", left)
	}
}

func TestProbeRefusesVolatile(t *testing.T) {
	const shm = "/dev/shm"
	volatile, err := IsVolatile(shm)
	if err != nil || !volatile {
		t.Skipf("%s is not a tmpfs here (%v)", shm, err)
	}
	if _, err := Probe(context.Background(), shm, Options{WriteBytes: 1 << 20, SyncIterations: 1}); !errors.Is(err, ErrVolatile) {
		t.Fatalf("Probe on %s: %v, want ErrVolatile", shm, err)
	}
	s, err := Describe(shm)
	if err != nil || !s.Volatile || !strings.Contains(s.String(), "volatile") {
		t.Fatalf("Describe(%s) = %v, %v", shm, s, err)
	}
}

func TestProbeOptions(t *testing.T) {
	if _, err := Probe(context.Background(), t.TempDir(), Options{WriteBytes: -1}); err == nil {
		t.Fatal("negative WriteBytes accepted")
	}
	d := Options{}.withDefaults()
	if d.WriteBytes != 1<<30 || d.SyncIterations != 2000 || d.SyncDuration != 5*time.Second {
		t.Fatalf("defaults %+v", d)
	}
}

func TestDescribe(t *testing.T) {
	for _, dir := range []string{"/", ".", t.TempDir()} {
		s, err := Describe(dir)
		if err != nil {
			t.Fatalf("Describe(%q): %v", dir, err)
		}
		t.Logf("Describe(%q) = %s (mounted on %s)", dir, s, s.MountPoint)
		if s.FSType == "" || s.Device == "" || s.String() == "" || s.FSType == "unknown" {
			t.Errorf("Describe(%q) = %+v", dir, s)
		}
	}
	if _, err := Describe("/does/not/exist"); err == nil {
		t.Error("Describe of a missing directory succeeded")
	}
}

const mountinfoFixture = `21 26 0:20 / /proc rw,relatime - proc proc rw
26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
24 23 0:22 / /dev/shm rw,relatime shared:3 - tmpfs tmpfs rw,size=24683620k
40 26 259:1 / /data rw,noatime shared:7 master:1 - xfs /dev/nvme0n1p1 rw
41 26 259:2 / /data/my\040disk rw - ext4 /dev/nvme1n1 rw
42 40 254:0 /srv /data/bind rw - ext4 /dev/vda rw
43 26 0:40 / /data/bind/over rw - overlay overlay rw
`

func TestParseMountinfo(t *testing.T) {
	mounts, err := parseMountinfo(strings.NewReader(mountinfoFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 7 {
		t.Fatalf("%d mounts", len(mounts))
	}
	if m := mounts[4]; m.mountPoint != "/data/my disk" || m.fsType != "ext4" || m.source != "/dev/nvme1n1" || m.major != 259 || m.minor != 2 {
		t.Fatalf("escaped mount parsed as %+v", m)
	}
	tests := []struct {
		path         string
		major, minor uint32
		wantPoint    string
	}{
		{"/", 254, 0, "/"},
		{"/home/user", 254, 0, "/"},
		{"/dev/shm/x", 0, 22, "/dev/shm"},
		{"/data", 259, 1, "/data"},
		{"/data/topic-0", 259, 1, "/data"},
		{"/database", 254, 0, "/"}, // a prefix of the name is not a parent
		{"/data/my disk/p", 259, 2, "/data/my disk"},
		{"/data/bind/x", 254, 0, "/data/bind"},
		{"/data/bind/over/x", 0, 40, "/data/bind/over"},
		{"/data/other", 0, 99, "/data"}, // device unknown: longest prefix
	}
	for _, tt := range tests {
		m, ok := pickMount(mounts, tt.path, tt.major, tt.minor)
		if !ok || m.mountPoint != tt.wantPoint {
			t.Errorf("pickMount(%q) = %+v, %v; want mount point %q", tt.path, m, ok, tt.wantPoint)
		}
	}
	if _, err := parseMountinfo(strings.NewReader("garbage line\n")); err == nil {
		t.Error("malformed mountinfo accepted")
	}
}

func TestCheckBelievable(t *testing.T) {
	good := Result{
		Storage:    Storage{FSType: "ext4", Device: "/dev/vda"},
		WriteBytes: 1 << 30, WriteDuration: 2 * time.Second, WriteSync: 100 * time.Millisecond,
		SyncCount: 100, SyncLatencyP50: 400 * time.Microsecond, SyncLatencyP90: 500 * time.Microsecond,
		SyncLatencyP99: 800 * time.Microsecond, SyncLatencyMax: 2 * time.Millisecond,
		ReadBytes: 1 << 30, ReadDuration: time.Second, CacheDropped: true,
	}
	tests := []struct {
		name   string
		modify func(*Result)
		want   string // substring of a Suspect entry; "" for none
	}{
		{"believable", func(*Result) {}, ""},
		{"fsync of 32 MiB in 10µs", func(r *Result) { r.WriteBytes, r.WriteDuration = 32<<20, 10*time.Microsecond }, "seq write"},
		{"read above 100 GB/s", func(r *Result) { r.ReadDuration = time.Millisecond }, "seq read"},
		{"sub-microsecond fdatasync", func(r *Result) {
			r.SyncLatencyP50, r.SyncLatencyP90 = 200*time.Nanosecond, 300*time.Nanosecond
		}, "faster than"},
		{"nothing read", func(r *Result) { r.ReadBytes = 0 }, "measured nothing"},
		{"no syncs", func(r *Result) { r.SyncCount = 0 }, "no fdatasync"},
		{"percentiles disordered", func(r *Result) { r.SyncLatencyP99 = time.Second }, "out of order"},
		{"tmpfs", func(r *Result) { r.Storage.Volatile = true }, "in memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good
			tt.modify(&r)
			r.checkBelievable()
			if tt.want == "" {
				if len(r.Suspect) != 0 {
					t.Fatalf("Suspect = %q", r.Suspect)
				}
				return
			}
			if !slices.ContainsFunc(r.Suspect, func(s string) bool { return strings.Contains(s, tt.want) }) {
				t.Fatalf("Suspect = %q, want an entry with %q", r.Suspect, tt.want)
			}
			if !strings.Contains(r.String(), "SUSPECT") {
				t.Fatalf("summary does not show the suspicion: %s", r)
			}
		})
	}
	r := good
	r.checkBelievable()
	want := "# disk: ext4 on /dev/vda — seq write 537 MB/s, fdatasync 4KiB p50 0.40ms p99 0.80ms, seq read 1.1 GB/s"
	if got := r.String(); got != want {
		t.Fatalf("String() =\n%s\nwant\n%s", got, want)
	}
}

func TestPercentile(t *testing.T) {
	var samples []time.Duration
	for i := 1; i <= 100; i++ {
		samples = append(samples, time.Duration(i))
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentile(samples, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one sample = %v", got)
	}
}

// TestFlushSizeOptions: an empty FlushSizes measures no flush loop, a size
// out of range is refused before anything is written.
func TestFlushSizeOptions(t *testing.T) {
	dir := t.TempDir()
	volatile, err := IsVolatile(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Probe(context.Background(), dir, Options{WriteBytes: 1 << 20, SyncIterations: 5, FlushSizes: []int64{}, AllowVolatile: volatile})
	if err != nil || len(r.Flushes) != 0 {
		t.Fatalf("FlushSizes empty: %d loops, %v", len(r.Flushes), err)
	}
	for _, bad := range []int64{0, -4096, 128 << 20} {
		if _, err := Probe(context.Background(), dir, Options{WriteBytes: 1 << 20, FlushSizes: []int64{bad}, AllowVolatile: volatile}); err == nil {
			t.Errorf("flush size %d accepted", bad)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("probe files left behind: %v", left)
	}
}
