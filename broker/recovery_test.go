package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartRecoversPartitionsInParallel: after a restart whose partitions
// are opened on several recovery threads at once, every partition of every
// topic is the one it was (its own end offset: no log handed to another
// partition), and the broker serves it.
func TestRestartRecoversPartitionsInParallel(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, Config{DataDir: dir})
	ctx := ctxT(t, 60*time.Second)
	topics := map[string]int32{"a": 3, "b": 5, "c": 2}
	for name, n := range topics {
		if _, err := tb.admin().CreateTopics(ctx, n, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	want := func(topic string, p int32) int64 { return int64(topic[0]-'a')*10 + int64(p) + 1 }
	cl := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for name, n := range topics {
		for p := range n {
			for i := range want(name, p) {
				r := &kgo.Record{Topic: name, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", name, p, i)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cl.Close()
	tb.stop()

	tb = startBroker(t, Config{DataDir: dir, RecoveryThreads: 4})
	for name, n := range topics {
		end, err := tb.admin().ListEndOffsets(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for p := range n {
			o, ok := end.Lookup(name, p)
			if !ok || o.Err != nil || o.Offset != want(name, p) {
				t.Fatalf("%s-%d after the restart: end offset %d (%v), want %d", name, p, o.Offset, o.Err, want(name, p))
			}
		}
	}
}
