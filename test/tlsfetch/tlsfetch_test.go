// Package tlsfetch measures what TLS costs the broker on the fetch path
// (design D5: fetch over TLS cannot use sendfile, every byte is read into
// user space and encrypted): broker CPU per GB fetched over an SSL
// listener against a PLAINTEXT listener of the same broker, in interleaved
// rounds. It is skipped unless -tlsfetch is given:
//
//	go test ./test/tlsfetch -run TestTLSFetchCPU -v -timeout 30m -args -tlsfetch -mib 1024 -rounds 5
package tlsfetch

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/test/testbroker"
)

var (
	enabled     = flag.Bool("tlsfetch", false, "run the TLS fetch CPU measurement")
	mib         = flag.Int("mib", 1024, "MiB of 1 KiB records to fill the topic with (each round fetches all of it)")
	rounds      = flag.Int("rounds", 5, "measured rounds per listener, interleaved")
	recordBytes = flag.Int("record-bytes", 1024, "record value size")
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbroker.Cleanup()
	os.Exit(code)
}

// round is one full read of the topic through one listener.
type round struct {
	tls         bool
	bytes       int64 // record values and keys fetched
	brokerCPU   time.Duration
	consumerCPU time.Duration
	wall        time.Duration
}

func (r round) cpuPerGB() float64 { return r.brokerCPU.Seconds() / (float64(r.bytes) / 1e9) }

func TestTLSFetchCPU(t *testing.T) {
	if !*enabled {
		t.Skip("measurement: run with -args -tlsfetch")
	}
	dir := t.TempDir()
	set, err := certs.CreateSet(filepath.Join(dir, "tls"), "bench", []string{"127.0.0.1"}, "bench")
	if err != nil {
		t.Fatal(err)
	}
	plainAddr, tlsAddr := "127.0.0.1:"+strconv.Itoa(testbroker.FreePort(t)), "127.0.0.1:"+strconv.Itoa(testbroker.FreePort(t))
	cmd := exec.Command(testbroker.Binary(t), "serve", "--data-dir", filepath.Join(dir, "data"), "--admin-listen", "",
		"--listeners", "PLAINTEXT://"+plainAddr+",SSL://"+tlsAddr,
		"--tls-cert-file", filepath.Join(dir, "tls", certs.ServerCertFile), "--tls-key-file", filepath.Join(dir, "tls", certs.ServerKeyFile),
		"--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := strconv.Itoa(cmd.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("tcp", tlsAddr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("broker did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pool := x509.NewCertPool()
	pool.AddCert(set.CA.Cert)
	tlsCfg := &tls.Config{RootCAs: pool}

	const topic = "tlsfetch"
	ctx := context.Background()
	total := int64(*mib) << 20
	n := int(total / int64(*recordBytes))
	prod, err := kgo.NewClient(kgo.SeedBrokers(plainAddr), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite(), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxBufferedRecords(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, *recordBytes)
	for i := range value {
		value[i] = byte(i*31 + 7)
	}
	start := time.Now()
	errs := make(chan error, 1)
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
		if i%100000 == 0 {
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("filled %s with %d records of %d B (%d MiB) in %s", topic, n, *recordBytes, *mib, time.Since(start).Round(time.Millisecond))

	readAll := func(useTLS bool) round {
		addr, opts := plainAddr, []kgo.Opt{}
		if useTLS {
			addr, opts = tlsAddr, append(opts, kgo.DialTLSConfig(tlsCfg))
		}
		opts = append(opts, kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		broker := bench.WatchCPU(pid)
		self := bench.WatchCPU("self")
		r := round{tls: useTLS}
		got := 0
		for got < n {
			fs := cl.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatal(err)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				got++
				r.bytes += int64(len(rec.Value) + len(rec.Key))
			})
		}
		bs, ss := broker.Stop(), self.Stop()
		if !bs.OK || !ss.OK {
			t.Fatal("cannot read /proc/PID/stat")
		}
		r.brokerCPU, r.wall, r.consumerCPU = bs.CPU, bs.Wall, ss.CPU
		return r
	}
	// Warm-up: the page cache and both listeners' first connections.
	readAll(false)
	readAll(true)
	var plain, secure []round
	for i := range *rounds {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, useTLS := range order {
			r := readAll(useTLS)
			t.Logf("round %d %-9s broker CPU %6.3f s = %5.3f s/GB, consumer CPU %6.3f s, wall %6.3f s (%.0f MB/s)", i, name(useTLS),
				r.brokerCPU.Seconds(), r.cpuPerGB(), r.consumerCPU.Seconds(), r.wall.Seconds(), float64(r.bytes)/1e6/r.wall.Seconds())
			if useTLS {
				secure = append(secure, r)
			} else {
				plain = append(plain, r)
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("machine: %s, %d CPUs, AES-NI %v, GOMAXPROCS %d; load before/after: %s", cpuModel(), runtime.NumCPU(), hasAES(), runtime.GOMAXPROCS(0), strings.TrimSpace(string(load)))
	ps, ss := summary(plain), summary(secure)
	t.Logf("broker CPU per GB fetched (best / median / worst): PLAINTEXT %.3f / %.3f / %.3f s; SSL %.3f / %.3f / %.3f s; SSL/PLAINTEXT median ratio %.2f",
		ps[0], ps[1], ps[2], ss[0], ss[1], ss[2], ss[1]/ps[1])
}

func name(useTLS bool) string {
	if useTLS {
		return "SSL"
	}
	return "PLAINTEXT"
}

// summary is the best, median and worst CPU per GB of rs.
func summary(rs []round) [3]float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.cpuPerGB())
	}
	slices.Sort(v)
	return [3]float64{v[0], v[len(v)/2], v[len(v)-1]}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func hasAES() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "flags") {
			return slices.Contains(strings.Fields(l), "aes")
		}
	}
	return false
}
