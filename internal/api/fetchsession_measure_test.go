package api_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/test/testbroker"
)

var measureSessions = flag.Bool("fetchsession.measure", false, "run TestFetchSessionMeasure: broker CPU and bytes per fetch response, sessionless vs sessions, against the built sushka binary")

// fetchCounter counts the Fetch responses a kgo client reads and their bytes.
type fetchCounter struct{ responses, bytes atomic.Int64 }

func (f *fetchCounter) OnBrokerRead(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.responses.Add(1)
		f.bytes.Add(int64(n))
	}
}

// cpuTicks is the user+system CPU of process pid, in clock ticks (100 Hz).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is the 3rd
	// field, utime the 14th, stime the 15th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

type fetchRound struct {
	cpu           time.Duration // the broker's CPU over the window
	cpuPerFetch   time.Duration // cpu / fetches, the producer's appends included
	netPerFetch   time.Duration // (cpu - the same round's producer alone) / fetches
	bytesPerFetch float64
	fetches       int64
}

// TestFetchSessionMeasure: a kgo consumer of n partitions (1,000 and
// 10,000) of which one receives 100 records a second, with fetch sessions
// (kgo's default) and without (kgo.DisableFetchSessions), against `sushka
// serve` as a child process: the broker's CPU per fetch response (its CPU
// over a window, less the same window's CPU with the producer alone,
// divided by the responses) and the bytes per response. Rounds interleave
// the two configurations (MEASURING.md rule 5).
func TestFetchSessionMeasure(t *testing.T) {
	if !*measureSessions {
		t.Skip("a measurement: run with -fetchsession.measure")
	}
	const (
		rounds = 5
		window = 3 * time.Second
	)
	bin := testbroker.Binary(t)
	t.Cleanup(testbroker.Cleanup)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("passport: %s GOMAXPROCS=%d NumCPU=%d loadavg %s", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.TrimSpace(string(load)))
	for _, n := range []int{1000, 10000} {
		p := testbroker.Start(t, bin, "--log-level", "warn", "--max-partitions-per-topic", "10000")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		// Creating 10,000 partitions (a directory and fsyncs each) takes
		// a minute or more on a loaded machine.
		admin := kadm.NewClient(mustClient(t, kgo.SeedBrokers(p.Addr), kgo.RequestTimeoutOverhead(5*time.Minute)))
		admin.SetTimeoutMillis(int32((5 * time.Minute).Milliseconds()))
		topic := fmt.Sprintf("measure-%d", n)
		// 10,000 partitions take a while: a retried request finds the
		// topic made by the first.
		if _, err := admin.CreateTopic(ctx, int32(n), 1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatal(err)
		}
		producer := mustClient(t, kgo.SeedBrokers(p.Addr), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		var produced atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // 100 records a second into partition 0: the one that changes
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					producer.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte("one changing partition")}, func(*kgo.Record, error) { produced.Add(1) })
				}
			}
		}()
		measureWindow := func(sessions *bool) fetchRound {
			var counter fetchCounter
			var consumer *kgo.Client
			if sessions != nil {
				opts := []kgo.Opt{kgo.SeedBrokers(p.Addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
					kgo.FetchMaxWait(500 * time.Millisecond), kgo.WithHooks(&counter)}
				if !*sessions {
					opts = append(opts, kgo.DisableFetchSessions())
				}
				var err error
				if consumer, err = kgo.NewClient(opts...); err != nil {
					t.Fatal(err)
				}
				// Warm-up: until records flow (the first full fetch and
				// a few more behind it).
				for got := 0; got < 20; {
					fs := consumer.PollFetches(ctx)
					if err := fs.Err(); err != nil {
						t.Fatal(err)
					}
					got += fs.NumRecords()
				}
			}
			polled := make(chan struct{})
			if consumer != nil {
				go func() {
					defer close(polled)
					pctx, pcancel := context.WithTimeout(ctx, window)
					defer pcancel()
					for pctx.Err() == nil {
						consumer.PollFetches(pctx)
					}
				}()
			} else {
				close(polled)
			}
			cpu0, resp0, bytes0 := cpuTicks(t, p.Pid()), counter.responses.Load(), counter.bytes.Load()
			time.Sleep(window)
			cpu1, resp1, bytes1 := cpuTicks(t, p.Pid()), counter.responses.Load(), counter.bytes.Load()
			<-polled
			if consumer != nil {
				consumer.Close()
			}
			r := fetchRound{fetches: resp1 - resp0, cpu: time.Duration(cpu1-cpu0) * 10 * time.Millisecond} // ticks of 10 ms
			if r.fetches > 0 {
				r.bytesPerFetch = float64(bytes1-bytes0) / float64(r.fetches)
				r.cpuPerFetch = r.cpu / time.Duration(r.fetches)
			}
			return r
		}
		results := map[string][]fetchRound{}
		var producerOnly []time.Duration
		for round := range rounds {
			base := measureWindow(nil).cpu // the producer's CPU over a window
			producerOnly = append(producerOnly, base)
			order := []bool{round%2 == 0, round%2 != 0}
			for _, sessions := range order {
				r := measureWindow(&sessions)
				r.netPerFetch = (r.cpu - base) / time.Duration(max(r.fetches, 1))
				name := map[bool]string{true: "sessions", false: "sessionless"}[sessions]
				results[name] = append(results[name], r)
				t.Logf("n=%d round %d %s: %d fetches in %v, broker CPU %v (producer alone %v): %v per fetch, %v less the producer's; %.0f bytes per response",
					n, round, name, r.fetches, window, r.cpu, base, r.cpuPerFetch, r.netPerFetch, r.bytesPerFetch)
			}
		}
		close(stop)
		wg.Wait()
		cancel()
		for _, name := range []string{"sessionless", "sessions"} {
			rs := results[name]
			sort.Slice(rs, func(i, j int) bool { return rs[i].cpuPerFetch < rs[j].cpuPerFetch })
			cpu := fmt.Sprintf("best %v median %v worst %v", rs[0].cpuPerFetch, rs[len(rs)/2].cpuPerFetch, rs[len(rs)-1].cpuPerFetch)
			sort.Slice(rs, func(i, j int) bool { return rs[i].netPerFetch < rs[j].netPerFetch })
			cpu += fmt.Sprintf(" (less the producer's: best %v median %v worst %v)", rs[0].netPerFetch, rs[len(rs)/2].netPerFetch, rs[len(rs)-1].netPerFetch)
			sort.Slice(rs, func(i, j int) bool { return rs[i].fetches < rs[j].fetches })
			fetches := rs[len(rs)/2].fetches
			sort.Slice(rs, func(i, j int) bool { return rs[i].bytesPerFetch < rs[j].bytesPerFetch })
			sort.Slice(producerOnly, func(i, j int) bool { return producerOnly[i] < producerOnly[j] })
			t.Logf("SUMMARY n=%d %s: broker CPU per fetch %s; bytes per response best %.0f median %.0f worst %.0f; fetches per %v window median %d",
				n, name, cpu, rs[0].bytesPerFetch, rs[len(rs)/2].bytesPerFetch, rs[len(rs)-1].bytesPerFetch, window, fetches)
		}
		t.Logf("SUMMARY n=%d producer alone: broker CPU per %v window median %v; %d records produced", n, window, producerOnly[len(producerOnly)/2], produced.Load())
		p.Stop(t)
	}
}

func mustClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
