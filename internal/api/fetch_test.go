package api

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/vfs"
)

// materialize concatenates a frame's pieces as the server would send them.
func materialize(t testing.TB, f *server.Frame) []byte {
	t.Helper()
	var out []byte
	for _, p := range f.Pieces {
		if p.File == nil {
			out = append(out, p.Bytes...)
			continue
		}
		buf := make([]byte, p.Len)
		if _, err := p.File.ReadAt(buf, p.Pos); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		out = append(out, buf...)
	}
	if int64(len(out)) != f.Len() {
		t.Fatalf("frame Len %d, pieces hold %d bytes", f.Len(), len(out))
	}
	return out
}

// TestEncodeFetchMatchesKmsg checks the hand-encoded Fetch response against
// kmsg's decoder (and encoder) for every version served.
func TestEncodeFetchMatchesKmsg(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "segment"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b1 := batch.Build(batch.BuildOptions{Records: 3, ValueSize: 10, ProducerID: -1})
	b2 := batch.Build(batch.BuildOptions{Records: 2, ValueSize: 7, KeySize: 3, ProducerID: -1, BaseOffset: 3})
	junk := []byte("not sent")
	for _, b := range [][]byte{junk, b1, b2} {
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	records := append(append([]byte(nil), b1...), b2...)
	id1 := [16]byte{1, 2, 3}
	id2 := [16]byte{9}

	fetch := servedKey(1)
	for v := fetch.minVersion; v <= fetch.maxVersion; v++ {
		topics := []fetchTopic{
			{name: "t1", id: id1, parts: []*fetchPart{
				{partition: 0, hwm: 5, lso: 3, logStart: 1, committed: true, result: plog.ReadResult{Chunks: []plog.Chunk{
					{File: f, Pos: int64(len(junk)), Len: int64(len(b1))},
					{File: f, Pos: int64(len(junk) + len(b1)), Len: int64(len(b2))},
				}, Aborted: []plog.AbortedTxn{{ProducerID: 9, FirstOffset: 1, LastOffset: 2}, {ProducerID: 11, FirstOffset: 2, LastOffset: 4}}}},
				{partition: 7, errorCode: kerr.OffsetOutOfRange.Code, hwm: 5, lso: 5, logStart: 1},
			}},
			{name: "t2", id: id2, parts: []*fetchPart{{partition: 3, hwm: 0, logStart: 0, committed: true}},
				missing: &missingPartitions{partitions: []int32{9}, code: kerr.UnknownTopicOrPartition.Code}},
			{name: "gone", id: [16]byte{7}, missing: &missingPartitions{partitions: []int32{0, 2}, code: kerr.UnknownTopicID.Code}},
		}
		raw := materialize(t, new(fetchState).encode(v, 0, topics))
		resp := kmsg.FetchResponse{Version: v}
		if err := resp.ReadFrom(raw); err != nil {
			t.Fatalf("v%d: kmsg cannot decode: %v", v, err)
		}
		if len(resp.Topics) != 3 || len(resp.Topics[0].Partitions) != 2 || len(resp.Topics[1].Partitions) != 2 || len(resp.Topics[2].Partitions) != 2 {
			t.Fatalf("v%d: shape %+v", v, resp)
		}
		for _, p := range append(resp.Topics[1].Partitions[1:], resp.Topics[2].Partitions...) {
			if p.ErrorCode == 0 || p.HighWatermark != -1 || len(p.RecordBatches) != 0 {
				t.Fatalf("v%d: missing partition answered %+v", v, p)
			}
		}
		if v >= 13 {
			if resp.Topics[0].TopicID != id1 || resp.Topics[1].TopicID != id2 {
				t.Fatalf("v%d: topic ids", v)
			}
		} else if resp.Topics[0].Topic != "t1" || resp.Topics[1].Topic != "t2" {
			t.Fatalf("v%d: topic names", v)
		}
		p0 := resp.Topics[0].Partitions[0]
		if p0.HighWatermark != 5 || p0.LastStableOffset != 3 || (v >= 5 && p0.LogStartOffset != 1) || p0.ErrorCode != 0 {
			t.Fatalf("v%d: partition 0 %+v", v, p0)
		}
		if a := p0.AbortedTransactions; len(a) != 2 || a[0].ProducerID != 9 || a[0].FirstOffset != 1 || a[1].ProducerID != 11 || a[1].FirstOffset != 2 {
			t.Fatalf("v%d: aborted transactions %+v", v, a)
		}
		// read_committed with nothing aborted: an empty list; read_uncommitted: null.
		if a := resp.Topics[1].Partitions[0].AbortedTransactions; a == nil || len(a) != 0 {
			t.Fatalf("v%d: read_committed without aborts answered %#v, want an empty list", v, a)
		}
		if a := resp.Topics[0].Partitions[1].AbortedTransactions; a != nil {
			t.Fatalf("v%d: read_uncommitted answered aborted transactions %#v, want null", v, a)
		}
		if !bytes.Equal(p0.RecordBatches, records) {
			t.Fatalf("v%d: records differ", v)
		}
		if p1 := resp.Topics[0].Partitions[1]; p1.Partition != 7 || p1.ErrorCode != kerr.OffsetOutOfRange.Code || len(p1.RecordBatches) != 0 {
			t.Fatalf("v%d: partition 7 %+v", v, p1)
		}
		if v >= 11 && p0.PreferredReadReplica != -1 {
			t.Fatalf("v%d: preferred read replica %d", v, p0.PreferredReadReplica)
		}
		// kmsg's own encoding of what it decoded is byte for byte ours.
		if again := resp.AppendTo(nil); !bytes.Equal(again, raw) {
			t.Fatalf("v%d: kmsg re-encodes differently:\nours %x\nkmsg %x", v, raw, again)
		}
	}
}

// TestEncodeFetchAllocs pins the allocations of encoding a one-partition
// fetch response into a used (pooled) state: none, the header buffer, the
// pieces and the frame are the state's. Record bytes are never copied
// (MEASURING.md rule 15).
func TestEncodeFetchAllocs(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "segment"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topics := []fetchTopic{{name: "t", parts: []*fetchPart{{hwm: 10, result: plog.ReadResult{Chunks: []plog.Chunk{{File: f, Pos: 0, Len: 1 << 20}}}}}}}
	for _, v := range []int16{4, 11, 12, 16} {
		fs := new(fetchState)
		allocs := testing.AllocsPerRun(100, func() { fs.encode(v, 0, topics) })
		t.Logf("v%d: %.0f allocations per response", v, allocs)
		if allocs > 0 {
			t.Fatalf("v%d: %.0f allocations per one-partition fetch response, floor is 0", v, allocs)
		}
	}
}

func BenchmarkEncodeFetch(b *testing.B) {
	topics := []fetchTopic{{name: "t", parts: []*fetchPart{{hwm: 10, result: plog.ReadResult{Chunks: []plog.Chunk{{Pos: 0, Len: 1 << 20}}}}}}}
	fs := new(fetchState)
	b.ReportAllocs()
	for b.Loop() {
		fs.encode(16, 0, topics)
	}
}
