package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// openFiles counts this process's descriptors open on files of topic's
// partitions in dir.
func openFiles(t *testing.T, dir, topic string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, filepath.Join(dir, topic)+"-") {
			n++
		}
	}
	return n
}

// TestManyPartitionsFewDescriptors: 300 partitions that were written once
// and are idle hold no more descriptors than MaxOpenSegmentFiles, instead
// of one per partition (one per segment before that), and none at all
// once SegmentFileIdleTimeout has passed, after their writes and again
// after a consumer read them all (which reopened the files).
func TestManyPartitionsFewDescriptors(t *testing.T) {
	const partitions, limit, idle = 300, 16, 300 * time.Millisecond
	tb := startBroker(t, Config{MaxOpenSegmentFiles: limit, SegmentFileIdleTimeout: idle})
	ctx := ctxT(t, 60*time.Second)
	cl := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.admin().CreateTopic(ctx, partitions, 1, nil, "wide"); err != nil {
		t.Fatal(err)
	}
	var records []*kgo.Record
	for p := range partitions {
		records = append(records, &kgo.Record{Topic: "wide", Partition: int32(p), Value: []byte(fmt.Sprint(p))})
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for openFiles(t, tb.dir, "wide") > limit && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFiles(t, tb.dir, "wide"); n > limit {
		t.Fatalf("%d files open for %d idle partitions, limit %d", n, partitions, limit)
	}
	noneOpen := func(after string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for openFiles(t, tb.dir, "wide") > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := openFiles(t, tb.dir, "wide"); n > 0 {
			t.Fatalf("%d files open for %d idle partitions %v after %s, want none", n, partitions, idle, after)
		}
	}
	noneOpen("their writes")
	consumed := consumeAll(t, tb, "wide", partitions)
	if len(consumed) != partitions {
		t.Fatalf("consumed %d records, want %d", len(consumed), partitions)
	}
	noneOpen("a consumer read them")
}
