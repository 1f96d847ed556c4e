package vfs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fsUnderTest is one filesystem the conformance tests run on, and the
// directory to work in.
type fsUnderTest struct {
	name string
	open func(t *testing.T) (FS, string)
}

var filesystems = []fsUnderTest{
	{"os", func(t *testing.T) (FS, string) { return Default, t.TempDir() }},
	{"mem", func(t *testing.T) (FS, string) {
		fs := NewMem()
		must(t, fs.MkdirAll("/data", 0o755))
		return fs, "/data"
	}},
	{"errorfs(mem)", func(t *testing.T) (FS, string) {
		fs := NewErrorFS(NewMem(), InjectorFunc(func(Op, string) error { return nil }))
		must(t, fs.MkdirAll("/data", 0o755))
		return fs, "/data"
	}},
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, n int, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("write: %v (n=%d)", err, n)
	}
}

func readAll(t *testing.T, fs FS, name string) []byte {
	t.Helper()
	data, err := ReadFile(fs, name)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return data
}

func writeFile(t *testing.T, fs FS, name string, data []byte) File {
	t.Helper()
	f, err := fs.Create(name)
	must(t, err)
	n, err := f.Write(data)
	mustWrite(t, n, err)
	return f
}

// conformance lists behaviours every FS must share with the OS.
var conformance = []struct {
	name string
	run  func(t *testing.T, fs FS, dir string)
}{
	{"write position", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "f")
		f := writeFile(t, fs, name, []byte("hello"))
		n, err := f.WriteAt([]byte("J"), 0) // does not move the write position
		mustWrite(t, n, err)
		n, err = f.Writev([][]byte{[]byte(" "), nil, []byte("wor"), {}, []byte("ld")})
		if err != nil || n != 6 {
			t.Fatalf("Writev = %d, %v; want 6, nil", n, err)
		}
		must(t, f.Close())
		if got := readAll(t, fs, name); string(got) != "Jello world" {
			t.Fatalf("contents %q", got)
		}
		g, err := fs.OpenReadWrite(name)
		must(t, err)
		n, err = g.Write([]byte("!"))
		mustWrite(t, n, err)
		if size, err := g.Size(); err != nil || size != 12 {
			t.Fatalf("Size = %d, %v", size, err)
		}
		must(t, g.Sync())
		must(t, g.Close())
		if got := readAll(t, fs, name); string(got) != "Jello world!" {
			t.Fatalf("contents %q", got)
		}
	}},
	{"writev many buffers", func(t *testing.T, fs FS, dir string) {
		// More buffers than IOV_MAX: the OS implementation must split.
		var bufs [][]byte
		var want []byte
		for i := range 3000 {
			b := []byte{byte(i), byte(i >> 8)}
			bufs = append(bufs, b)
			want = append(want, b...)
		}
		name := filepath.Join(dir, "v")
		f, err := fs.Create(name)
		must(t, err)
		n, err := f.Writev(bufs)
		if err != nil || n != len(want) {
			t.Fatalf("Writev = %d, %v", n, err)
		}
		must(t, f.Close())
		if got := readAll(t, fs, name); !bytes.Equal(got, want) {
			t.Fatal("contents differ")
		}
	}},
	{"read at", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "r")
		must(t, writeFile(t, fs, name, []byte("0123456789")).Close())
		f, err := fs.Open(name)
		must(t, err)
		defer f.Close()
		p := make([]byte, 4)
		if n, err := f.ReadAt(p, 3); n != 4 || err != nil || string(p) != "3456" {
			t.Fatalf("ReadAt(3) = %d, %v, %q", n, err, p)
		}
		if n, err := f.ReadAt(p, 8); n != 2 || err != io.EOF || string(p[:n]) != "89" {
			t.Fatalf("ReadAt(8) = %d, %v, %q", n, err, p[:n])
		}
		if n, err := f.ReadAt(p, 10); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt(10) = %d, %v", n, err)
		}
		if _, err := f.Write([]byte("x")); err == nil {
			t.Fatal("Write on a read-only file succeeded")
		}
		if _, err := f.Map(4); err == nil {
			t.Fatal("Map of a read-only file succeeded")
		}
	}},
	{"truncate", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "t")
		f := writeFile(t, fs, name, []byte("abcdef"))
		defer f.Close()
		must(t, f.Truncate(2))
		must(t, f.Truncate(5)) // the regrown part is zeros, not the old bytes
		if got := readAll(t, fs, name); !bytes.Equal(got, []byte("ab\x00\x00\x00")) {
			t.Fatalf("contents %q", got)
		}
		n, err := f.WriteAt([]byte("z"), 8) // past the end: a zero gap
		mustWrite(t, n, err)
		if got := readAll(t, fs, name); !bytes.Equal(got, []byte("ab\x00\x00\x00\x00\x00\x00z")) {
			t.Fatalf("contents %q", got)
		}
		if fi, err := fs.Stat(name); err != nil || fi.Size() != 9 || fi.IsDir() || fi.Name() != "t" {
			t.Fatalf("Stat = %v, %v", fi, err)
		}
		// Create truncates an existing file.
		must(t, writeFile(t, fs, name, []byte("new")).Close())
		if got := readAll(t, fs, name); string(got) != "new" {
			t.Fatalf("contents after Create %q", got)
		}
	}},
	{"map", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "m")
		f, err := fs.Create(name)
		must(t, err)
		must(t, f.Truncate(8192))
		if _, err := f.Map(8193); err == nil {
			t.Fatal("Map past the end of the file succeeded")
		}
		m, err := f.Map(4096)
		must(t, err)
		if len(m) != 4096 {
			t.Fatalf("len(mapping) = %d", len(m))
		}
		if _, err := f.Map(4096); err == nil {
			t.Fatal("second Map succeeded")
		}
		copy(m[100:], "mapped")
		p := make([]byte, 6)
		if _, err := f.ReadAt(p, 100); err != nil || string(p) != "mapped" {
			t.Fatalf("ReadAt after a store = %q, %v", p, err)
		}
		n, err := f.WriteAt([]byte("WRITE"), 200) // within the size: allowed
		mustWrite(t, n, err)
		if string(m[200:205]) != "WRITE" {
			t.Fatalf("mapping does not see WriteAt: %q", m[200:205])
		}
		must(t, f.Sync())
		must(t, f.Unmap())
		must(t, f.Unmap()) // no mapping: no-op
		must(t, f.Truncate(100))
		must(t, f.Close())
		if got := readAll(t, fs, name); len(got) != 100 {
			t.Fatalf("size %d", len(got))
		}
		g, err := fs.OpenReadWrite(name)
		must(t, err)
		must(t, g.Truncate(4096))
		m, err = g.Map(4096)
		must(t, err)
		if m[0] != 0 || m[100] != 0 {
			t.Fatal("regrown part is not zero")
		}
		copy(m, "head")
		must(t, g.Close()) // releases the mapping
		if got := readAll(t, fs, name); string(got[:4]) != "head" {
			t.Fatalf("stores lost at Close: %q", got[:4])
		}
	}},
	{"list rename remove", func(t *testing.T, fs FS, dir string) {
		for _, name := range []string{"c", "a", "b"} {
			must(t, writeFile(t, fs, filepath.Join(dir, name), []byte(name)).Close())
		}
		must(t, fs.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
		wantList(t, fs, dir, "a", "b", "c", "sub")
		must(t, fs.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b"))) // replaces b
		wantList(t, fs, dir, "b", "c", "sub")
		if got := readAll(t, fs, filepath.Join(dir, "b")); string(got) != "a" {
			t.Fatalf("renamed contents %q", got)
		}
		must(t, fs.Rename(filepath.Join(dir, "c"), filepath.Join(dir, "sub", "c")))
		wantList(t, fs, filepath.Join(dir, "sub"), "c", "deeper")
		if err := fs.Rename(filepath.Join(dir, "nope"), filepath.Join(dir, "x")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Rename of a missing file: %v", err)
		}
		if err := fs.Remove(filepath.Join(dir, "sub")); err == nil {
			t.Fatal("Remove of a non-empty directory succeeded")
		}
		must(t, fs.Remove(filepath.Join(dir, "b")))
		if err := fs.Remove(filepath.Join(dir, "b")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("second Remove: %v", err)
		}
		if _, err := fs.Stat(filepath.Join(dir, "b")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Stat of a removed file: %v", err)
		}
		if fi, err := fs.Stat(filepath.Join(dir, "sub")); err != nil || !fi.IsDir() {
			t.Fatalf("Stat(sub) = %v, %v", fi, err)
		}
		must(t, fs.SyncDir(dir))
		must(t, fs.RemoveAll(filepath.Join(dir, "sub")))
		must(t, fs.RemoveAll(filepath.Join(dir, "sub"))) // missing: not an error
		wantList(t, fs, dir)
		if _, err := fs.List(filepath.Join(dir, "sub")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("List of a removed directory: %v", err)
		}
	}},
	{"errors keep the path", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "missing")
		for _, op := range []func() error{
			func() error { _, err := fs.Open(name); return err },
			func() error { _, err := fs.OpenReadWrite(name); return err },
			func() error { _, err := fs.Stat(name); return err },
			func() error { _, err := fs.Create(filepath.Join(name, "x")); return err },
		} {
			err := op()
			var pe *os.PathError
			if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &pe) || pe.Path == "" {
				t.Fatalf("error %v (%T): want a *os.PathError for a missing file", err, err)
			}
		}
		must(t, writeFile(t, fs, filepath.Join(dir, "file"), nil).Close())
		if err := fs.MkdirAll(filepath.Join(dir, "file", "sub"), 0o755); err == nil {
			t.Fatal("MkdirAll through a file succeeded")
		}
	}},
	{"start writeback", func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "w")
		data := bytes.Repeat([]byte("0123456789abcdef"), 1000)
		f := writeFile(t, fs, name, data)
		must(t, f.StartWriteback(0, 8192))
		must(t, f.StartWriteback(8192, int64(len(data))-8192))
		must(t, f.StartWriteback(0, 0)) // Linux: through the end of the file
		if err := f.StartWriteback(-1, 10); err == nil {
			t.Fatal("StartWriteback at a negative offset succeeded")
		}
		n, err := f.Write([]byte("tail")) // the write position did not move
		mustWrite(t, n, err)
		must(t, f.Sync())
		if got := readAll(t, fs, name); !bytes.Equal(got, append(bytes.Clone(data), "tail"...)) {
			t.Fatalf("contents changed: %d bytes", len(got))
		}
		must(t, f.Close())
	}},
	{"closed file", func(t *testing.T, fs FS, dir string) {
		f := writeFile(t, fs, filepath.Join(dir, "c"), []byte("x"))
		must(t, f.Close())
		if _, err := f.Write([]byte("y")); err == nil {
			t.Fatal("Write after Close succeeded")
		}
		if err := f.StartWriteback(0, 1); err == nil {
			t.Fatal("StartWriteback after Close succeeded")
		}
		if err := f.Close(); err == nil {
			t.Fatal("second Close succeeded")
		}
	}},
}

func wantList(t *testing.T, fs FS, dir string, want ...string) {
	t.Helper()
	got, err := fs.List(dir)
	must(t, err)
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("List(%s) = %q, want %q", dir, got, want)
	}
}

func TestConformance(t *testing.T) {
	for _, fsCase := range filesystems {
		t.Run(fsCase.name, func(t *testing.T) {
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) {
					fs, dir := fsCase.open(t)
					tc.run(t, fs, dir)
				})
			}
		})
	}
}

func TestOSFileIsOSFile(t *testing.T) {
	for _, fs := range []FS{Default, NewErrorFS(Default, FailAfter(OpSync, 1))} {
		f, err := fs.Create(filepath.Join(t.TempDir(), "x"))
		must(t, err)
		osf, ok := f.(OSFile)
		if !ok || osf.OS() == nil {
			t.Fatalf("%T does not expose its *os.File", f)
		}
		must(t, f.Close())
	}
	f, err := NewMem().Create("x")
	must(t, err)
	if _, ok := f.(OSFile); ok {
		t.Fatal("a MemFS file claims to be an OSFile")
	}
}
