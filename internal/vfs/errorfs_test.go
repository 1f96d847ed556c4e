package vfs

import (
	"errors"
	"os"
	"testing"
)

func TestErrorFS(t *testing.T) {
	// Each case runs ops on /d/seg and /d/other in a fixed order and lists
	// which of them must fail.
	type step struct {
		op   Op
		file string // "seg" or "other"
		fail bool
	}
	tests := []struct {
		name   string
		inject Injector
		steps  []step
	}{
		{
			name:   "FailAfter sync 3",
			inject: FailAfter(OpSync, 3),
			steps: []step{
				{OpSync, "seg", false}, {OpWrite, "seg", false}, {OpSync, "other", false},
				{OpSync, "seg", true}, {OpWrite, "seg", false}, {OpSync, "other", true},
			},
		},
		{
			name:   "FailAfter 1 fails all",
			inject: FailAfter(OpWritev, 1),
			steps:  []step{{OpWritev, "seg", true}, {OpWritev, "other", true}, {OpWrite, "seg", false}},
		},
		{
			name:   "FailAfter any",
			inject: FailAfter(OpAny, 3),
			steps:  []step{{OpWrite, "seg", false}, {OpRead, "seg", false}, {OpSync, "seg", true}, {OpMap, "seg", true}},
		},
		{
			name:   "OnPath",
			inject: OnPath("seg", OpWriteAt),
			steps: []step{
				{OpWriteAt, "other", false}, {OpWriteAt, "seg", true}, {OpWrite, "seg", false},
				{OpWriteAt, "seg", true}, {OpTruncate, "seg", false},
			},
		},
		{
			name:   "OnPath start writeback",
			inject: OnPath("seg", OpStartWriteback),
			steps: []step{
				{OpStartWriteback, "other", false}, {OpStartWriteback, "seg", true}, {OpSync, "seg", false},
			},
		},
		{
			name:   "OnPath any op",
			inject: OnPath("seg", OpAny),
			steps: []step{
				{OpRead, "seg", true}, {OpTruncate, "seg", true}, {OpMap, "seg", true},
				{OpSize, "seg", true}, {OpRead, "other", false}, {OpSyncDir, "seg", true},
			},
		},
		{
			name:   "AnyOf",
			inject: AnyOf(OnPath("other", OpSync), FailAfter(OpSync, 2)),
			steps: []step{
				// The failing sync of other is not counted by FailAfter.
				{OpSync, "other", true}, {OpSync, "seg", false}, {OpSync, "seg", true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := NewMem()
			must(t, mem.MkdirAll("/d", 0o755))
			for _, name := range []string{"/d/seg", "/d/other"} {
				f := writeFile(t, mem, name, make([]byte, 64))
				must(t, f.Close())
			}
			// The injector is switched on once the files are open, so the
			// opens do not count.
			var active Injector
			fs := NewErrorFS(mem, InjectorFunc(func(op Op, path string) error {
				if active == nil {
					return nil
				}
				return active.MaybeError(op, path)
			}))
			files := map[string]File{}
			for _, name := range []string{"seg", "other"} {
				f, err := fs.OpenReadWrite("/d/" + name)
				must(t, err)
				files[name] = f
			}
			active = tt.inject
			for i, s := range tt.steps {
				f := files[s.file]
				var err error
				switch s.op {
				case OpWrite:
					_, err = f.Write([]byte("x"))
				case OpWritev:
					_, err = f.Writev([][]byte{[]byte("x")})
				case OpWriteAt:
					_, err = f.WriteAt([]byte("x"), 0)
				case OpRead:
					_, err = f.ReadAt(make([]byte, 1), 0)
				case OpSync:
					err = f.Sync()
				case OpStartWriteback:
					err = f.StartWriteback(0, 64)
				case OpTruncate:
					err = f.Truncate(64)
				case OpSize:
					_, err = f.Size()
				case OpMap:
					if _, err = f.Map(8); err == nil {
						err = f.Unmap()
					}
				case OpSyncDir:
					err = fs.SyncDir("/d/" + s.file) // not a directory, but the injector decides first
					if !s.fail {
						err = nil
					}
				default:
					t.Fatalf("step %d: no driver for %v", i, s.op)
				}
				if got := errors.Is(err, ErrInjected); got != s.fail {
					t.Fatalf("step %d (%v on %s): err = %v, want injected %v", i, s.op, s.file, err, s.fail)
				}
				if err != nil && s.fail {
					var pe *os.PathError
					if !errors.As(err, &pe) || pe.Path != "/d/"+s.file {
						t.Fatalf("step %d: error %v does not name the file", i, err)
					}
				}
			}
		})
	}
}

func TestErrorFSFailedOpsDoNothing(t *testing.T) {
	mem := NewMem()
	fs := NewErrorFS(mem, AnyOf(OnPath("bad", OpAny), FailAfter(OpWrite, 2)))
	if _, err := fs.Create("/bad"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Create: %v", err)
	}
	if _, err := mem.Stat("/bad"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a failed Create created the file")
	}
	f, err := fs.Create("/good")
	must(t, err)
	n, err := f.Write([]byte("one"))
	mustWrite(t, n, err)
	if n, err := f.Write([]byte("two")); !errors.Is(err, ErrInjected) || n != 0 {
		t.Fatalf("second Write = %d, %v", n, err)
	}
	if got := readAll(t, mem, "/good"); string(got) != "one" {
		t.Fatalf("a failed Write wrote: %q", got)
	}
	if err := fs.Rename("/good", "/bad"); err != nil {
		t.Fatalf("Rename is checked against the old name: %v", err)
	}
	if err := fs.Rename("/bad", "/good"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Rename from bad: %v", err)
	}
	if err := fs.Remove("/bad"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := fs.List("/"); err != nil {
		t.Fatal(err)
	}
	must(t, f.Close())
}

func TestErrorFSCloseReleasesInner(t *testing.T) {
	mem := NewMem()
	fs := NewErrorFS(mem, FailAfter(OpClose, 1))
	f, err := fs.Create("/f")
	must(t, err)
	if err := f.Close(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Close: %v", err)
	}
	// The inner file is closed anyway.
	if _, err := f.(*errorFile).inner.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("inner file still open: %v", err)
	}
}
