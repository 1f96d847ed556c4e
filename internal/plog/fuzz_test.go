package plog

import (
	"path"
	"testing"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// FuzzRecover feeds arbitrary bytes to the recovery scan as the content of a
// segment (and, split at a fuzzed point, of two segments): Open must not
// panic or hang, and when it succeeds every batch it serves is valid.
func FuzzRecover(f *testing.F) {
	valid := append(mkBatch(3, 40, 1), mkBatch(1, 0, 2)...)
	batch.SetBaseOffset(valid[len(mkBatch(3, 40, 1)):], 3)
	f.Add(valid, uint16(0))
	f.Add(valid[:len(valid)-7], uint16(0))                                        // torn tail
	f.Add(append(append([]byte(nil), valid...), make([]byte, 300)...), uint16(0)) // zero tail
	f.Add(valid, uint16(len(mkBatch(3, 40, 1))))                                  // two segments
	flipped := append([]byte(nil), valid...)
	flipped[70] ^= 1
	f.Add(flipped, uint16(0))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		mem := vfs.NewMem()
		dir := "/d/p-0"
		mem.MkdirAll(dir, 0o755)
		write := func(base int64, b []byte) {
			file, _ := mem.Create(path.Join(dir, segmentName(base)))
			file.Write(b)
			file.Close()
		}
		if s := int(split); s > 0 && s < len(data) {
			h, err := batch.ParseHeader(data)
			base := int64(0)
			if err == nil && h.LastOffset() >= 0 && h.LastOffset() < 1<<40 {
				base = h.LastOffset() + 1
			}
			write(0, data[:s])
			write(base, data[s:])
		} else {
			write(0, data)
		}
		cfg := DefaultConfig(mem, dir)
		cfg.Logger = quietLogger
		l, err := Open(cfg)
		if err != nil {
			return // corruption or I/O errors are fine; panics are not
		}
		defer l.Close()
		readAll(t, l, l.LogStartOffset()) // fails the test on an invalid batch
	})
}
