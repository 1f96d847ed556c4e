package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/test/testbroker"
)

// TestMain removes the broker binary that testbroker.Binary built, once,
// after every test of the package: a test's own Cleanup would remove it
// under the tests that run after it.
func TestMain(m *testing.M) { testbroker.Main(m) }

// runBench runs `sushka bench ARGS` in-process (this test process is the
// generator; the broker is a child process).
func runBench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sushka", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newBenchCmd())
	root.SetArgs(append([]string{"bench"}, args...))
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		t.Logf("stderr:\n%s", errb.String())
	}
	return out.String(), err
}

// TestBenchSmoke runs every subcommand for about a second against a Sushka
// broker started from the built binary, and checks the report's shape and
// a collapse floor only (MEASURING.md rule 17: CI never gates on
// performance).
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the broker")
	}
	bin := testbroker.Binary(t)
	admin := "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))
	p := testbroker.Start(t, bin, "--admin-listen", admin)
	// serve opens its admin listener after the Kafka one (which Start
	// waits for): under load the first report could miss the broker's
	// runtime profile.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := bench.FetchRuntime(context.Background(), admin); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the broker's admin endpoint: %v", err)
		}
	}
	common := []string{"--brokers", p.Addr, "--broker-admin", admin, "--rounds", "1", "--no-calibration",
		"--duration", "700ms", "--drain", "10s", "--disk-probe-bytes", "1048576", "--allow-tmpfs"}

	t.Run("produce", func(t *testing.T) {
		js := filepath.Join(t.TempDir(), "r.json")
		out, err := runBench(t, append([]string{"produce", "--rate", "500", "--record-size", "128", "--json", js}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"# host:", "# generator (this process", "GOMAXPROCS=", "# system sushka: " + p.Addr,
			"#   storage: ", "#   durability: ", "# durability asked: acks=all", "# loadavg before:", "# disk: ", "open-loop",
			"best (median) [worst]", "# WARNING: 1 round(s)", "## item 4: p99 against the disk's fdatasync p99",
			"the 4 KiB probe's"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		doc, b := readDocument(t, js)
		if doc.Schema != bench.SchemaVersion || len(doc.Scenarios) != 1 || doc.Environment.Host.OS == "" ||
			len(doc.Environment.Systems) != 1 || doc.Environment.Systems[0].Runtime == nil {
			t.Fatalf("document: %s", b)
		}
		sr := doc.Scenarios[0].Systems[0]
		r := sr.Raw[0]
		if r.Errors != 0 || r.Unfinished != 0 || r.Acked != r.Issued || r.Acked < 300 {
			t.Errorf("raw counts: %+v", r)
		}
		// Collapse floor: 500/s offered, a tenth of it achieved.
		if r.Throughput < 50 {
			t.Errorf("collapse: %.0f records/s of 500 offered", r.Throughput)
		}
		if doc.Environment.Systems[0].PID == "" || !r.BrokerCPU.OK {
			t.Errorf("the broker's pid should be found from its listening socket: %+v", doc.Environment.Systems[0])
		}
		// Each round's topic is deleted after the round (a session of
		// saturation rounds would fill the disk otherwise).
		if left := benchTopics(t, p.Addr); len(left) != 0 {
			t.Errorf("bench left its topics behind: %v", left)
		}
	})

	t.Run("produce-raw", func(t *testing.T) {
		js := filepath.Join(t.TempDir(), "r.json")
		out, err := runBench(t, append([]string{"produce", "--engine", "raw", "--rate", "2000", "--record-size", "128", "--partitions", "4",
			"--connections", "2", "--batch-records", "10", "--json", js}, append(common, "--duration", "2s")...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"engine=raw connections=2 in-flight=16 batch=10 idempotent=true", "gen s/GB", "broker µs/rec",
			"generator CPU per byte = ", "round 1 offered-rate: generator "} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		doc, _ := readDocument(t, js)
		r := doc.Scenarios[0].Systems[0].Raw[0]
		// 2000 records/s for 2 s in requests of 2 partitions × 10 records.
		// The rate is kept (offered-rate) unless other processes fill the
		// machine (CI runs packages in parallel): then the label must say so.
		// Two seconds, not 0.7: a 62 ms fsync stall on CI's disk at the end
		// of a 0.7 s window was 7% of it, achieved 1862 of 2000/s, which the
		// rule rightly calls broker-bound; at 2 s a stall must pass 100 ms.
		if r.Errors != 0 || r.Unfinished != 0 || r.Acked != r.Issued || r.Acked != 4000 ||
			(r.Bound != bench.BoundOfferedRate && r.Bound != bench.BoundMachine) {
			t.Errorf("raw counts: %+v", r)
		}
		if !r.GeneratorCPU.OK || !r.BrokerCPU.OK || !r.BrokerWrite.OK {
			t.Errorf("CPU and write figures: %+v %+v %+v", r.GeneratorCPU, r.BrokerCPU, r.BrokerWrite)
		}
		if _, err := runBench(t, append([]string{"produce", "--engine", "raw", "-z", "lz4"}, common...)...); err == nil ||
			!strings.Contains(err.Error(), "--engine raw sends uncompressed batches") {
			t.Errorf("a codec with the raw engine: %v", err)
		}
		if _, err := runBench(t, append([]string{"produce", "--engine", "raw", "--acks", "1", "--idempotent"}, common...)...); err == nil ||
			!strings.Contains(err.Error(), "--idempotent needs --acks all") {
			t.Errorf("--idempotent with acks=1: %v", err)
		}
	})

	t.Run("consume-raw", func(t *testing.T) {
		out, err := runBench(t, append([]string{"consume", "--engine", "raw", "--connections", "2", "--partitions", "3", "--records", "3000", "--record-size", "256"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "consume 256 B p=3 engine=raw connections=2") || !strings.Contains(out, " 3000 ") {
			t.Errorf("report:\n%s", out)
		}
	})

	t.Run("produce-max-vs-kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		out, err := runBench(t, append([]string{"produce", "--max", "--window", "200", "--vs", c.ListenAddrs()[0], "--vs-name", "kfake",
			"--rounds", "2"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"closed-loop", "sushka vs kfake on records_per_s (best rounds): ", "# system kfake: "} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		// Interleaved: sushka 1, kfake 1, sushka 2, kfake 2 in the progress.
	})

	t.Run("vs-exec", func(t *testing.T) {
		script := `echo noise; echo '{"records_per_s": 1234, "mode": "open-loop", "offered_per_s": 500, "issued": 10, "acked": 10, "latency": {"p99_ms": 3}}'`
		out, err := runBench(t, append([]string{"produce", "--rate", "300", "--vs-exec", script, "--vs-name", "peer"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "peer") || !strings.Contains(out, "1234") {
			t.Errorf("the exec peer's round is missing:\n%s", out)
		}
	})

	t.Run("consume", func(t *testing.T) {
		out, err := runBench(t, append([]string{"consume", "--records", "3000", "--record-size", "256"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "consume 256 B") || !strings.Contains(out, " 3000 ") {
			t.Errorf("report:\n%s", out)
		}
	})

	t.Run("e2e", func(t *testing.T) {
		out, err := runBench(t, append([]string{"e2e", "--rate", "300"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "e2e 1024 B") || strings.Contains(out, "received ") {
			t.Errorf("report:\n%s", out)
		}
	})

	t.Run("matrix", func(t *testing.T) {
		out, err := runBench(t, append([]string{"matrix", "--records", "300"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"DISK", "linger=0ms  compression=none", "linger=50ms compression=zstd"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "compression=") && strings.HasSuffix(line, " 0.0MB") {
				t.Errorf("no DISK bytes: %s", line)
			}
		}
	})

	t.Run("sweep", func(t *testing.T) {
		out, err := runBench(t, append([]string{"sweep", "--steps", "0.1,0.5", "--window", "100", "--duration", "400ms"}, common...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"## knee", "closed-loop saturation", "p99 at 50% of saturation", "fdatasync (4 KiB append) p99",
			"## item 4: p99 against the disk's fdatasync p99"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("disk", func(t *testing.T) {
		out, err := runBench(t, "disk", "--data-dir", t.TempDir(), "--write-bytes", "1048576", "--sync-iterations", "20", "--allow-tmpfs")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "# disk: ") || !strings.Contains(out, "fdatasync p50") || !strings.Contains(out, "# disk raw:") {
			t.Errorf("report:\n%s", out)
		}
	})
}

func TestBenchRefusesTmpfs(t *testing.T) {
	dir := "/dev/shm"
	if v, err := isVolatileDir(dir); err != nil || !v {
		t.Skip("no tmpfs at /dev/shm")
	}
	_, err := runBench(t, "disk", "--data-dir", dir, "--write-bytes", "1048576")
	if err == nil || !strings.Contains(err.Error(), "--allow-tmpfs") {
		t.Fatalf("a storage probe on tmpfs must be refused with a hint, got %v", err)
	}
}

func isVolatileDir(dir string) (bool, error) {
	st, err := bench.CheckStorage(dir, false)
	if err != nil {
		return strings.Contains(st, "volatile"), nil
	}
	return false, nil
}

// readDocument reads a results document (--json).
func readDocument(t *testing.T, path string) (bench.Document, []byte) {
	t.Helper()
	var doc bench.Document
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc, b
}

// benchTopics lists the topics named like sushka bench's on the broker.
func benchTopics(t *testing.T, addr string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, "sushka-bench-") {
			names = append(names, name)
		}
	}
	return names
}
