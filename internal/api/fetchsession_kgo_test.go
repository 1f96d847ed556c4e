package api

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchSizes records the size of every Fetch response a kgo client reads
// (kgo.HookBrokerRead), and how many of them there were.
type fetchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (f *fetchSizes) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, err error) {
	if key != 1 || err != nil {
		return
	}
	f.mu.Lock()
	f.sizes = append(f.sizes, bytesRead)
	f.mu.Unlock()
}

// since returns the sizes read from the n-th response on, sorted.
func (f *fetchSizes) since(n int) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]int(nil), f.sizes[min(n, len(f.sizes)):]...)
	sort.Ints(out)
	return out
}

func (f *fetchSizes) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sizes)
}

// TestFranzGoSessionConsumer: a franz-go consumer of 1,000 partitions
// (fetch sessions on, kgo's default) reads one record from each, then
// one more appended while it is caught up; while nothing changes, its
// fetch responses are a few dozen bytes, against some 50 KB each with
// kgo.DisableFetchSessions (every partition answered every time).
func TestFranzGoSessionConsumer(t *testing.T) {
	const partitions = 1000
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", partitions)
	for _, l := range tp.parts {
		appendOne(t, l)
	}
	idle := map[bool]int{} // sessions → median response bytes while caught up
	for _, sessions := range []bool{true, false} {
		sizes := &fetchSizes{}
		opts := []kgo.Opt{kgo.SeedBrokers(tb.addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(100 * time.Millisecond), kgo.WithHooks(sizes)}
		if !sessions {
			opts = append(opts, kgo.DisableFetchSessions())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		consume := func(n int) {
			t.Helper()
			for got := 0; got < n; {
				fs := cl.PollFetches(ctx)
				if err := fs.Err(); err != nil {
					t.Fatalf("sessions %t: poll after %d of %d records: %v", sessions, got, n, err)
				}
				got += fs.NumRecords()
			}
		}
		consume(partitions)
		// Caught up: every fetch waits out its 100 ms with nothing new.
		caughtUp := sizes.count() + 2 // fetches already sent may still carry records
		// Polled meanwhile, as a consumer does: kgo sends its next fetch
		// only once the one it buffered is polled.
		for deadline := time.Now().Add(20 * time.Second); sizes.count() < caughtUp+5 && time.Now().Before(deadline); {
			pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			cl.PollFetches(pctx)
			pcancel()
		}
		idleSizes := sizes.since(caughtUp)
		appendVisible(t, tp.parts[partitions/2])
		consume(1)
		cancel()
		cl.Close()
		if len(idleSizes) < 3 {
			t.Fatalf("sessions %t: %d fetch responses while caught up, want some", sessions, len(idleSizes))
		}
		idle[sessions] = idleSizes[len(idleSizes)/2]
		t.Logf("sessions %t: %d fetch responses while caught up, bytes min %d median %d max %d", sessions, len(idleSizes), idleSizes[0], idle[sessions], idleSizes[len(idleSizes)-1])
	}
	if idle[true] > 100 || idle[false] < 10*idle[true] {
		t.Fatalf("caught-up fetch responses: %d bytes with sessions, %d without: want a few dozen with", idle[true], idle[false])
	}
	if n := tb.fetchSessions.len(); n > 1 {
		t.Fatalf("%d fetch sessions left: kgo closes its session when it closes", n)
	}
}
