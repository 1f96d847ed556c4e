package kafka_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// TestSlowPartitionCostsTheOthersNothing: partition 0's handler blocks for
// 2 s on its first record, with a backlog behind it that fills the
// transport's holdBytes within a few fetches (64 KiB values that compress
// about 20 times: a 1 MiB fetch holds ~20 MiB of them); partitions 1–3
// have backlogs of 2 KiB random values, each handled at a paced 2 000
// records per second. The same backlog is consumed four times by fresh
// groups: twice with partition 0's handler blocking, twice without. The
// others' records handled during the 2 s after partition 0's first record
// must be at least 90 % of the same count without the block.
//
// Why paced: unpaced, the others would get the cores the blocked handler
// frees and a stall would hide in their extra speed; paced, their count
// is what the pacer allows minus the time they waited for records, in
// both runs. Why 90 %: the allowed cost is one fetch round trip and one
// re-fetch of partition 0 when kgo's fetching of it is paused (a few ms of
// 2 s); the rest is room for the timing noise of a shared 2-core machine
// (single rounds under load 12–18 dipped by up to 8 %; the sum of two
// rounds each halves that). Before (stream/kafka of main at 615cd94): at
// holdBytes Poll stopped polling kgo until a partition was resumed, and
// paused kgo's fetching of partition 0 only after holdWait (500 ms)
// without a resume: the others, their held records handled, waited those
// 500 ms, a quarter of the window (0.76–0.83 of the baseline in 3 runs).
func TestSlowPartitionCostsTheOthersNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 64 MiB of values (3 MiB compressed) and 30 MiB")
	}
	addr := streamtest.StartSushka(t, 4)
	const (
		topic       = "slow"
		block       = 2 * time.Second
		slowRecords = 1024    // 64 MiB of values on partition 0
		rate        = 2000    // records per second per other partition
		perOther    = 5_000   // 2.5 s of pacing
		otherSize   = 2 << 10 // random: a fetch of 1 MiB holds ~1 MiB of them
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slowValue := make([]byte, 64<<10)
	publishRecords(ctx, t, addr, topic, slowRecords+3*perOther, func(i int) *kgo.Record {
		if i < slowRecords {
			return &kgo.Record{Topic: topic, Partition: 0, Value: slowValue}
		}
		value := make([]byte, otherSize)
		_, _ = rand.Read(value)
		return &kgo.Record{Topic: topic, Partition: int32(1 + i%3), Value: value}
	})

	// run consumes the backlog in group and returns the others' records
	// handled during block after partition 0's first record, in all and
	// per tenth of it.
	run := func(group string, blocking bool) (int64, [10]int64) {
		app := stream.New(kafka.Transport(kgo.SeedBrokers(addr)), stream.Group(group))
		var (
			first       atomic.Int64 // partition 0's first record, UnixNano
			slowHandled atomic.Int64
			inWindow    atomic.Int64
			tenths      [10]atomic.Int64
			othersTotal atomic.Int64
			pacers      [4]pacer // one per partition: each is handled by one goroutine
		)
		stream.Consume(app, topic, func(ctx context.Context, _ []byte) error {
			p := stream.Current(ctx).Partition
			now := time.Now()
			if p == 0 {
				if first.CompareAndSwap(0, now.UnixNano()) && blocking {
					time.Sleep(block)
				}
				slowHandled.Add(1)
				return nil
			}
			pacers[p].wait(rate)
			othersTotal.Add(1)
			if start := first.Load(); start != 0 {
				if since := time.Since(time.Unix(0, start)); since < block {
					inWindow.Add(1)
					tenths[since*10/block].Add(1)
				}
			}
			return nil
		})
		stop := runApp(app)
		for deadline := time.Now().Add(30 * time.Second); slowHandled.Load() < slowRecords || othersTotal.Load() < 3*perOther; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d records of partition 0 and %d of %d of the others handled after 30 s",
					group, slowHandled.Load(), slowRecords, othersTotal.Load(), 3*perOther)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		// One member, no failure: nothing may come twice.
		if slowHandled.Load() != slowRecords || othersTotal.Load() != 3*perOther {
			t.Errorf("%s: %d records of partition 0 handled (of %d) and %d of the others (of %d)",
				group, slowHandled.Load(), slowRecords, othersTotal.Load(), 3*perOther)
		}
		var perTenth [10]int64
		for i := range tenths {
			perTenth[i] = tenths[i].Load()
		}
		return inWindow.Load(), perTenth
	}
	// Twice each, in the order A B B A, so that a drift of the machine's
	// load during the test weighs on both alike.
	var baseline, blocked int64
	for i, blocking := range []bool{false, true, true, false} {
		group := "baseline" + strconv.Itoa(i)
		if blocking {
			group = "blocked" + strconv.Itoa(i)
		}
		n, tenths := run(group, blocking)
		t.Logf("%s: the others handled %d records in the %v after partition 0's first (the pacer allows %d); per %v: %v",
			group, n, block, int64(3*rate*block/time.Second), block/10, tenths)
		if blocking {
			blocked += n
		} else {
			baseline += n
		}
	}
	t.Logf("with partition 0 blocked the others handled %.2f times what they did without", float64(blocked)/float64(baseline))
	if float64(blocked) < 0.9*float64(baseline) {
		t.Errorf("with partition 0 blocked the others handled %d records in twice %v, without %d: they waited for the slow partition",
			blocked, block, baseline)
	}
}

// pacer spaces records rate per second apart, sleeping in steps of at
// least 2 ms. A partition that falls behind its pace catches up by at most
// 50 ms of records (the oversleeping of a loaded machine is made good, a
// stall is not).
type pacer struct{ next time.Time }

func (p *pacer) wait(rate int) {
	now := time.Now()
	if earliest := now.Add(-50 * time.Millisecond); p.next.Before(earliest) {
		p.next = earliest
	}
	p.next = p.next.Add(time.Second / time.Duration(rate))
	if d := p.next.Sub(now); d > 2*time.Millisecond {
		time.Sleep(d)
	}
}
