package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
)

const crashSeeds = 200

func seeded(seed int) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x5eed)) }

// dump renders a filesystem's tree and contents, for comparisons.
func dump(t *testing.T, fs FS) string {
	t.Helper()
	var b strings.Builder
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		must(t, err)
		for _, name := range names {
			p := path.Join(dir, name)
			fi, err := fs.Stat(p)
			must(t, err)
			if fi.IsDir() {
				fmt.Fprintf(&b, "%s/\n", p)
				walk(p)
			} else {
				fmt.Fprintf(&b, "%s %q\n", p, readAll(t, fs, p))
			}
		}
	}
	walk("/")
	return b.String()
}

// isCrashOutcome reports whether got is a contents the crash model allows
// for a file with durable contents durable and current contents current:
// some prefix of current, then durable's bytes, then zeros.
func isCrashOutcome(durable, current, got []byte) bool {
	if len(got) < min(len(durable), len(current)) || len(got) > max(len(durable), len(current)) {
		return false
	}
	if len(current) < len(durable) && len(got) != len(current) && len(got) != len(durable) {
		return false // a truncation is kept or lost as a whole
	}
	rest := func(k int) bool { // got[k:] is durable's bytes, then zeros
		for i := k; i < len(got); i++ {
			want := byte(0)
			if i < len(durable) {
				want = durable[i]
			}
			if got[i] != want {
				return false
			}
		}
		return true
	}
	for k := 0; k <= len(got); k++ {
		if k > 0 && (k > len(current) || got[k-1] != current[k-1]) {
			return false
		}
		if rest(k) {
			return true
		}
	}
	return false
}

func TestIsCrashOutcome(t *testing.T) {
	tests := []struct {
		durable, current, got string
		want                  bool
	}{
		{"abc", "abc", "abc", true},
		{"abc", "abcdef", "abc", true},
		{"abc", "abcdef", "abcd", true},
		{"abc", "abcdef", "abcd\x00", true},
		{"abc", "abcdef", "abc\x00\x00\x00", true},
		{"abc", "abcdef", "abce", false},
		{"abc", "abcdef", "ab", false},
		{"abc", "xbc", "xbc", true},
		{"abc", "xyz", "xbc", true},
		{"abc", "xyz", "ayc", false}, // not a prefix
		{"abcdef", "ab", "ab", true},
		{"abcdef", "ab", "abcdef", true},
		{"abcdef", "xy", "xbcdef", true},
		{"abcdef", "xy", "xyc", false}, // sizes are all or nothing when shrinking
	}
	for _, tt := range tests {
		if got := isCrashOutcome([]byte(tt.durable), []byte(tt.current), []byte(tt.got)); got != tt.want {
			t.Errorf("isCrashOutcome(%q, %q, %q) = %v", tt.durable, tt.current, tt.got, got)
		}
	}
}

// TestCrashContents checks the file model on many shapes of change.
func TestCrashContents(t *testing.T) {
	tests := []struct {
		name             string
		durable, current []byte
	}{
		{"unchanged", []byte("0123456789"), []byte("0123456789")},
		{"append", []byte("0123456789"), []byte("0123456789abcdefghij")},
		{"from empty", nil, []byte("abcdefghij")},
		{"overwrite", []byte("0123456789"), []byte("012XYZ6789")},
		{"overwrite and append", []byte("0123456789"), []byte("012XYZ6789abcdef")},
		{"preallocate", []byte("0123"), append([]byte("0123"), make([]byte, 60)...)},
		{"preallocate and write", []byte("0123"), append([]byte("0123abcd"), make([]byte, 56)...)},
		{"shrink", []byte("0123456789"), []byte("0123")},
		{"shrink and write", []byte("0123456789"), []byte("01ZZ")},
		{"to empty", []byte("0123456789"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sizes := map[int]bool{}
			for seed := range crashSeeds {
				got := crashContents(tt.durable, tt.current, seeded(seed))
				if !isCrashOutcome(tt.durable, tt.current, got) {
					t.Fatalf("seed %d: %q is not a crash outcome of %q -> %q", seed, got, tt.durable, tt.current)
				}
				sizes[len(got)] = true
			}
			if !bytes.Equal(crashContents(tt.durable, tt.current, nil), tt.durable) {
				t.Fatal("Crash(nil) did not keep exactly the durable contents")
			}
			// Both the durable and the current size must occur.
			if !sizes[len(tt.durable)] || !sizes[len(tt.current)] {
				t.Fatalf("sizes seen %v, want both %d and %d", sizes, len(tt.durable), len(tt.current))
			}
		})
	}
}

// isPageCrashOutcome reports whether got is a contents the out-of-order
// crash model allows: a size that crashSize allows, and each page a prefix
// of current's bytes followed by durable's bytes, then zeros.
func isPageCrashOutcome(durable, current, got []byte) bool {
	if len(got) < min(len(durable), len(current)) || len(got) > max(len(durable), len(current)) {
		return false
	}
	if len(current) < len(durable) && len(got) != len(current) && len(got) != len(durable) {
		return false
	}
	old := func(i int) byte {
		if i < len(durable) {
			return durable[i]
		}
		return 0
	}
	for page := 0; page < len(got); page += PageSize {
		end := min(page+PageSize, len(got))
		i := page
		for i < end && i < len(current) && got[i] == current[i] {
			i++
		}
		for ; i < end; i++ {
			if got[i] != old(i) {
				return false
			}
		}
	}
	return true
}

// TestCrashPages checks the out-of-order model: every outcome is allowed,
// and over the seeds a later page survives without an earlier one, and a
// page is torn.
func TestCrashPages(t *testing.T) {
	durable := bytes.Repeat([]byte("d"), PageSize+100)
	current := append(slices.Clone(durable[:PageSize/2]), bytes.Repeat([]byte("c"), 5*PageSize)...)
	var outOfOrder, torn, exact bool
	for seed := range crashSeeds {
		got := crashPages(durable, current, seeded(seed))
		if !isPageCrashOutcome(durable, current, got) {
			t.Fatalf("seed %d: not an out-of-order crash outcome", seed)
		}
		exact = exact || bytes.Equal(got, durable)
		// Pages 2 and 3 of current lie past the durable contents.
		if len(got) >= 4*PageSize && got[2*PageSize] == 0 && got[3*PageSize] == 'c' {
			outOfOrder = true
		}
		for p := PageSize; p+PageSize <= len(got); p += PageSize {
			if got[p] == 'c' && got[p+PageSize-1] != 'c' {
				torn = true
			}
		}
	}
	if !outOfOrder || !torn || !exact {
		t.Fatalf("over %d seeds: a later page without an earlier one %v, a torn page %v, exactly durable %v", crashSeeds, outOfOrder, torn, exact)
	}
	if !bytes.Equal(crashPages(durable, current, nil), durable) {
		t.Fatal("CrashOutOfOrder(nil) did not keep exactly the durable contents")
	}
	// The in-order shapes are out-of-order outcomes too.
	for _, tt := range [][2]string{{"abc", "abcdef"}, {"0123456789", "012XYZ6789"}, {"0123456789", "01ZZ"}, {"", "abcdefghij"}} {
		for seed := range crashSeeds {
			if got := crashPages([]byte(tt[0]), []byte(tt[1]), seeded(seed)); !isPageCrashOutcome([]byte(tt[0]), []byte(tt[1]), got) {
				t.Fatalf("seed %d: %q is not an outcome of %q -> %q", seed, got, tt[0], tt[1])
			}
		}
	}
}

// TestCrashOutOfOrderKeepsSynced: whatever the out-of-order writeback, a
// file's synced bytes survive.
func TestCrashOutOfOrderKeepsSynced(t *testing.T) {
	y := NewMem()
	f, err := y.Create("/f")
	must(t, err)
	synced := bytes.Repeat([]byte("s"), 3*PageSize+7)
	_, err = f.Write(synced)
	must(t, err)
	must(t, f.Sync())
	must(t, y.SyncDir("/"))
	_, err = f.Write(bytes.Repeat([]byte("u"), 4*PageSize))
	must(t, err)
	for seed := range crashSeeds {
		got := readAll(t, y.CrashOutOfOrder(seeded(seed)), "/f")
		if len(got) < len(synced) || !bytes.Equal(got[:len(synced)], synced) {
			t.Fatalf("seed %d: synced bytes changed by a crash", seed)
		}
	}
}

// TestCrash drives scenarios through the FS API and checks every outcome
// over many seeds.
func TestCrash(t *testing.T) {
	type outcome struct {
		exists   bool
		contents []byte
	}
	tests := []struct {
		name string
		// setup acts on fs; the file checked is /d/f.
		setup func(t *testing.T, fs *MemFS)
		// check is called with the crashed state of /d/f.
		check func(t *testing.T, o outcome)
		// seen are outcomes (rendered by render) that must occur in some seed.
		seen []string
	}{
		{
			name: "synced data and entry survive",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("durable"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				n, err := f.Write([]byte(" and more"))
				mustWrite(t, n, err)
			},
			check: func(t *testing.T, o outcome) {
				if !o.exists || !bytes.HasPrefix(o.contents, []byte("durable")) {
					t.Fatalf("synced data lost: %v %q", o.exists, o.contents)
				}
				if !isCrashOutcome([]byte("durable"), []byte("durable and more"), o.contents) {
					t.Fatalf("%q is not a crash outcome", o.contents)
				}
			},
			seen: []string{`"durable"`, `"durable and more"`},
		},
		{
			name: "created and never dir-synced may vanish",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("data"))
				must(t, f.Sync())
			},
			check: func(t *testing.T, o outcome) {
				if o.exists && string(o.contents) != "data" {
					t.Fatalf("contents %q", o.contents)
				}
			},
			seen: []string{"missing", `"data"`},
		},
		{
			name: "dir-synced but data never synced",
			setup: func(t *testing.T, fs *MemFS) {
				writeFile(t, fs, "/d/f", []byte("0123456789"))
				must(t, fs.SyncDir("/d"))
			},
			check: func(t *testing.T, o outcome) {
				if !o.exists || !isCrashOutcome(nil, []byte("0123456789"), o.contents) {
					t.Fatalf("outcome %v %q", o.exists, o.contents)
				}
			},
			seen: []string{`""`, `"0123456789"`},
		},
		{
			name: "unsynced remove may be undone",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("old"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				must(t, fs.Remove("/d/f"))
			},
			seen: []string{"missing", `"old"`},
		},
		{
			name: "synced remove is final",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("old"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				must(t, fs.Remove("/d/f"))
				must(t, fs.SyncDir("/d"))
			},
			seen: []string{"missing"},
		},
		{
			name: "rename over, dir-synced",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("v1"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				g := writeFile(t, fs, "/d/f.tmp", []byte("v2"))
				must(t, g.Sync())
				must(t, fs.Rename("/d/f.tmp", "/d/f"))
				must(t, fs.SyncDir("/d"))
			},
			check: func(t *testing.T, o outcome) {
				if string(o.contents) != "v2" {
					t.Fatalf("contents %q", o.contents)
				}
			},
			seen: []string{`"v2"`},
		},
		{
			name: "rename over, not dir-synced: old or new, never torn",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("v1"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				g := writeFile(t, fs, "/d/f.tmp", []byte("v2"))
				must(t, g.Sync())
				must(t, fs.Rename("/d/f.tmp", "/d/f"))
			},
			seen: []string{`"v1"`, `"v2"`},
		},
		{
			name: "preallocation keeps or loses its size",
			setup: func(t *testing.T, fs *MemFS) {
				f := writeFile(t, fs, "/d/f", []byte("head"))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				must(t, f.Truncate(16))
			},
			check: func(t *testing.T, o outcome) {
				if len(o.contents) < 4 || string(o.contents[:4]) != "head" || bytes.ContainsFunc(o.contents[4:], func(r rune) bool { return r != 0 }) {
					t.Fatalf("contents %q", o.contents)
				}
			},
			seen: []string{`"head"`, `"head\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"`},
		},
		{
			name: "mapped stores persist after Sync",
			setup: func(t *testing.T, fs *MemFS) {
				f, err := fs.Create("/d/f")
				must(t, err)
				must(t, f.Truncate(8))
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				m, err := f.Map(8)
				must(t, err)
				copy(m, "mapped")
				must(t, f.Sync())
				copy(m[6:], "!!") // unsynced
			},
			check: func(t *testing.T, o outcome) {
				if !o.exists || !isCrashOutcome([]byte("mapped\x00\x00"), []byte("mapped!!"), o.contents) {
					t.Fatalf("outcome %v %q", o.exists, o.contents)
				}
			},
			seen: []string{`"mapped\x00\x00"`, `"mapped!!"`},
		},
		{
			name: "mapped stores persist after Unmap and Sync",
			setup: func(t *testing.T, fs *MemFS) {
				f, err := fs.Create("/d/f")
				must(t, err)
				must(t, f.Truncate(8))
				m, err := f.Map(8)
				must(t, err)
				copy(m, "abcdefgh")
				must(t, f.Unmap())
				must(t, f.Sync())
				must(t, fs.SyncDir("/d"))
				must(t, f.Close())
			},
			seen: []string{`"abcdefgh"`},
		},
	}
	render := func(o outcome) string {
		if !o.exists {
			return "missing"
		}
		return fmt.Sprintf("%q", o.contents)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := NewMem()
			must(t, fs.MkdirAll("/d", 0o755))
			must(t, fs.SyncDir("/"))
			tt.setup(t, fs)
			before := dump(t, fs)
			seen := map[string]bool{}
			for seed := -1; seed < crashSeeds; seed++ {
				rng := seeded(seed)
				if seed < 0 {
					rng = nil // the worst case is a case too
				}
				crashed := fs.Crash(rng)
				var o outcome
				if data, err := ReadFile(crashed, "/d/f"); err == nil {
					o = outcome{exists: true, contents: data}
				} else if !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				if _, err := crashed.Stat("/d/f.tmp"); err == nil && render(o) == `"v2"` {
					t.Fatalf("seed %d: rename left both names", seed)
				}
				if tt.check != nil {
					tt.check(t, o)
				}
				seen[render(o)] = true
			}
			for _, want := range tt.seen {
				if !seen[want] {
					t.Errorf("outcome %s never occurred; seen %v", want, seen)
				}
			}
			if after := dump(t, fs); after != before {
				t.Fatalf("Crash changed the filesystem:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestCrashDirectories(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/a/b/c", 0o755))
	f := writeFile(t, fs, "/a/b/c/f", []byte("x"))
	must(t, f.Sync())
	must(t, fs.SyncDir("/a/b/c"))
	// The parents were never synced: the whole tree may be gone.
	if got := dump(t, fs.Crash(nil)); got != "" {
		t.Fatalf("unsynced directories survived Crash(nil):\n%s", got)
	}
	must(t, fs.SyncDir("/a/b"))
	must(t, fs.SyncDir("/a"))
	must(t, fs.SyncDir("/"))
	want := "/a/\n/a/b/\n/a/b/c/\n/a/b/c/f \"x\"\n"
	for seed := range crashSeeds {
		if got := dump(t, fs.Crash(seeded(seed))); got != want {
			t.Fatalf("seed %d:\n%s\nwant\n%s", seed, got, want)
		}
	}
	// RemoveAll not synced: the tree comes back with or without its entries.
	must(t, fs.RemoveAll("/a/b"))
	seen := map[string]bool{}
	for seed := range crashSeeds {
		seen[dump(t, fs.Crash(seeded(seed)))] = true
	}
	if !seen["/a/\n"] || !seen[want] || !seen["/a/\n/a/b/\n"] {
		t.Fatalf("outcomes of an unsynced RemoveAll: %v", seen)
	}
}

func TestCrashIsDeterministicAndIndependent(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d", 0o755))
	f := writeFile(t, fs, "/d/f", bytes.Repeat([]byte("abcdefgh"), 100))
	must(t, f.Sync())
	must(t, fs.SyncDir("/d"))
	n, err := f.Write(bytes.Repeat([]byte("XYZ"), 100))
	mustWrite(t, n, err)
	for i := range 20 {
		writeFile(t, fs, fmt.Sprintf("/d/g%d", i), bytes.Repeat([]byte{byte(i)}, 50*i))
	}
	for seed := range 20 {
		a, b := dump(t, fs.Crash(seeded(seed))), dump(t, fs.Crash(seeded(seed)))
		if a != b {
			t.Fatalf("seed %d: two crashes differ", seed)
		}
	}

	crashed := fs.Crash(seeded(1))
	snapshot := dump(t, crashed)
	// Writes to the old filesystem's open file do not reach the new one...
	n, err = f.WriteAt([]byte("changed"), 0)
	mustWrite(t, n, err)
	must(t, f.Sync())
	must(t, fs.Remove("/d/f"))
	if dump(t, crashed) != snapshot {
		t.Fatal("the old filesystem changed the crashed one")
	}
	// ...nor the other way round, and the crashed filesystem is all durable.
	before := dump(t, fs)
	g, err := crashed.OpenReadWrite("/d/f")
	must(t, err)
	n, err = g.Write([]byte("new"))
	mustWrite(t, n, err)
	if dump(t, fs) != before {
		t.Fatal("the crashed filesystem changed the old one")
	}
	must(t, g.Sync())
	again := dump(t, crashed)
	if got := dump(t, crashed.Crash(nil)); got != again {
		t.Fatalf("a crashed filesystem lost data at a second crash:\n%s\nwant\n%s", got, again)
	}
}

func TestMemMappedSizeIsFixed(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("/f")
	must(t, err)
	must(t, f.Truncate(16))
	m, err := f.Map(8)
	must(t, err)
	ops := []struct {
		name string
		do   func() error
	}{
		{"Write past the end", func() error { _, err := f.WriteAt(make([]byte, 4), 14); return err }},
		{"Writev past the end", func() error { _, err := f.Writev([][]byte{make([]byte, 10), make([]byte, 10)}); return err }},
		{"Truncate down", func() error { return f.Truncate(8) }},
		{"Truncate up", func() error { return f.Truncate(32) }},
		{"Create over it", func() error { _, err := fs.Create("/f"); return err }},
	}
	for _, op := range ops {
		if err := op.do(); !errors.Is(err, ErrMapped) {
			t.Errorf("%s while mapped: %v, want ErrMapped", op.name, err)
		}
	}
	if size, _ := f.Size(); size != 16 {
		t.Fatalf("size changed to %d", size)
	}
	copy(m, "12345678") // the mapping is still the file
	must(t, f.Unmap())
	must(t, f.Truncate(32))
	if got := readAll(t, fs, "/f"); string(got[:8]) != "12345678" || len(got) != 32 {
		t.Fatalf("contents %q", got)
	}
}

// TestMemStartWritebackIsNotDurable: writeback started is not a sync: a
// crash keeps only what Sync made durable, and no sync is counted.
func TestMemStartWritebackIsNotDurable(t *testing.T) {
	fs := NewMem()
	f := writeFile(t, fs, "/f", []byte("synced"))
	must(t, f.Sync())
	must(t, fs.SyncDir("/"))
	n, err := f.Write([]byte(" unsynced"))
	mustWrite(t, n, err)
	must(t, f.StartWriteback(0, 15))
	if got := dump(t, fs.Crash(nil)); got != "/f \"synced\"\n" {
		t.Fatalf("after StartWriteback, a crash left %q", got)
	}
	if fs.SyncCount() != 1 {
		t.Fatalf("%d syncs counted, want 1", fs.SyncCount())
	}
}

func TestMemSyncHookAndCounters(t *testing.T) {
	fs := NewMem()
	var events []string
	var crashes []*MemFS
	fs.SetSyncHook(func(op Op, name string) {
		events = append(events, op.String()+" "+name)
		crashes = append(crashes, fs.Crash(nil)) // the lock is not held
	})
	f := writeFile(t, fs, "/f", []byte("a"))
	must(t, f.Sync())
	must(t, fs.SyncDir("/"))
	n, err := f.Write([]byte("b"))
	mustWrite(t, n, err)
	must(t, f.Sync())
	if want := []string{"sync /f", "sync-dir /", "sync /f"}; strings.Join(events, ",") != strings.Join(want, ",") {
		t.Fatalf("events %q, want %q", events, want)
	}
	if fs.SyncCount() != 2 || fs.SyncDirCount() != 1 {
		t.Fatalf("counters %d syncs, %d dir syncs", fs.SyncCount(), fs.SyncDirCount())
	}
	// The snapshot taken in the hook sees the sync that triggered it.
	wantDumps := []string{"", "/f \"a\"\n", "/f \"ab\"\n"}
	for i, c := range crashes {
		if got := dump(t, c); got != wantDumps[i] {
			t.Errorf("crash at event %d: %q, want %q", i, got, wantDumps[i])
		}
	}
	fs.SetSyncHook(nil)
	must(t, f.Sync())
	if len(events) != 3 {
		t.Fatal("hook called after removal")
	}
}

func TestMemConcurrent(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d", 0o755))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("/d/f%d", i)
			f, err := fs.Create(name)
			if err != nil {
				t.Error(err)
				return
			}
			for j := range 100 {
				if _, err := f.Write([]byte{byte(j)}); err != nil {
					t.Error(err)
				}
				if j%10 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
					_, _ = fs.List("/d")
					_ = fs.Crash(seeded(j))
				}
			}
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	names, err := fs.List("/d")
	must(t, err)
	if len(names) != 4 {
		t.Fatalf("List = %q", names)
	}
}

func TestCommonPrefix(t *testing.T) {
	long := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	for _, i := range []int{0, 1, 4095, 4096, 4097, 8192, 15999} {
		changed := bytes.Clone(long)
		changed[i] ^= 0xff
		if got := commonPrefix(long, changed); got != i {
			t.Errorf("commonPrefix with a change at %d = %d", i, got)
		}
	}
	if got := commonPrefix(long, long[:5000]); got != 5000 {
		t.Errorf("commonPrefix of a prefix = %d", got)
	}
}
