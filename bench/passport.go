package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sushka-io/sushka/internal/diskprobe"
)

// Profile is a Go process's runtime profile as it actually got it
// (MEASURING.md rule 2).
type Profile struct {
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	GOGC       string `json:"gogc"`
	GOMEMLIMIT string `json:"gomemlimit"`
	Build      string `json:"build,omitempty"`
}

// SelfProfile is this process's profile.
func SelfProfile() Profile {
	pct := debug.SetGCPercent(-1)
	debug.SetGCPercent(pct)
	gogc := "off"
	if pct >= 0 {
		gogc = strconv.Itoa(pct)
	}
	lim := debug.SetMemoryLimit(-1)
	memlim := "unlimited"
	if lim != 1<<63-1 {
		memlim = strconv.FormatInt(lim, 10)
	}
	p := Profile{GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GOGC: gogc, GOMEMLIMIT: memlim}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var parts []string
		for _, s := range bi.Settings {
			switch s.Key {
			case "-gcflags", "-ldflags", "-tags", "-race", "CGO_ENABLED", "GOAMD64", "GOARM64", "-pgo":
				parts = append(parts, s.Key+"="+s.Value)
			}
		}
		p.Build = strings.Join(parts, " ")
	}
	return p
}

// RuntimeDoc is the document a broker serves on its admin port at
// /v1/runtime: Sushka's `serve` and the peers under bench/peers serve this
// shape (the peers add pid). Unknown fields are kept in Extra.
type RuntimeDoc struct {
	Version    string `json:"version,omitempty"`
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	GOGC       string `json:"gogc"`
	GOMEMLIMIT string `json:"gomemlimit"`
	DataDir    string `json:"data_dir"`
	Storage    string `json:"storage"`
	Durability string `json:"durability"`
	PID        int    `json:"pid,omitempty"`
	Broker     string `json:"broker,omitempty"`
}

// PeerRuntime builds the /v1/runtime document for a peer broker process
// (bench/peers) whose data lives in dataDir ("" when in memory).
func PeerRuntime(broker, dataDir, durability string) RuntimeDoc {
	p := SelfProfile()
	d := RuntimeDoc{GoVersion: p.GoVersion, GOMAXPROCS: p.GOMAXPROCS, NumCPU: p.NumCPU, GOGC: p.GOGC, GOMEMLIMIT: p.GOMEMLIMIT,
		DataDir: dataDir, Durability: durability, PID: os.Getpid(), Broker: broker, Storage: "memory (no data directory)"}
	if dataDir != "" {
		d.Storage = DescribeStorage(dataDir)
	}
	return d
}

// DescribeStorage is "ext4 on /dev/vda" for dir (with " (volatile)" for a
// filesystem in memory), or "unknown (…)".
func DescribeStorage(dir string) string {
	st, err := diskprobe.Describe(dir)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return st.String()
}

// ServeRuntime serves doc at /v1/runtime on l (what FetchRuntime reads), as
// the peers under bench/peers do on their admin listener; it returns when
// l fails or is closed (http.Serve).
func ServeRuntime(l net.Listener, doc RuntimeDoc) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/runtime", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	return http.Serve(l, mux)
}

// FetchRuntime reads http://admin/v1/runtime.
func FetchRuntime(ctx context.Context, admin string) (RuntimeDoc, error) {
	var d RuntimeDoc
	b, err := adminGet(ctx, admin, "/v1/runtime", 1<<20)
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// adminGet reads path from a broker's admin listener (host:port or a URL),
// at most limit bytes, within 3 s.
func adminGet(ctx context.Context, admin, path string, limit int64) ([]byte, error) {
	url := admin
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + path
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// System is one broker under test.
type System struct {
	Name    string `json:"name"`
	Brokers string `json:"brokers"`
	Admin   string `json:"admin,omitempty"`
	// PID of the broker process, for its CPU time ("" when unknown).
	PID string `json:"pid,omitempty"`
	// PIDSource says where PID came from: "flag", "/v1/runtime" or
	// "listening socket".
	PIDSource string      `json:"pid_source,omitempty"`
	Runtime   *RuntimeDoc `json:"runtime,omitempty"`
	// RuntimeError is why Runtime is missing.
	RuntimeError string `json:"runtime_error,omitempty"`
	// Exec, when set, runs this command for every round instead of the
	// built-in Kafka generator (a peer that does not speak Kafka).
	Exec string `json:"exec,omitempty"`
}

// Resolve fills Runtime from the admin endpoint and finds the PID.
func (s *System) Resolve(ctx context.Context) {
	if s.Admin != "" {
		d, err := FetchRuntime(ctx, s.Admin)
		if err != nil {
			s.RuntimeError = err.Error()
		} else {
			s.Runtime = &d
		}
	}
	switch {
	case s.PID != "":
		s.PIDSource = "flag"
	case s.Runtime != nil && s.Runtime.PID > 0:
		s.PID, s.PIDSource = strconv.Itoa(s.Runtime.PID), "/v1/runtime"
	case s.Brokers != "":
		if p := ListenerPID(strings.Split(s.Brokers, ",")[0]); p != "" {
			s.PID, s.PIDSource = p, "listening socket"
		}
	}
}

// Host is the machine's passport (MEASURING.md rule 3).
type Host struct {
	CPU      string `json:"cpu"`
	Cores    string `json:"cores"`
	Memory   string `json:"memory"`
	OS       string `json:"os"`
	Arch     string `json:"architecture"`
	Hostname string `json:"hostname,omitempty"`
}

// ReadHost reads /proc/cpuinfo, /proc/meminfo and uname; a field the
// machine does not tell is "unknown", never invented.
func ReadHost() Host {
	h := Host{CPU: "unknown", Memory: "unknown", OS: "unknown", Arch: runtime.GOARCH}
	h.Cores = fmt.Sprintf("%d logical", runtime.NumCPU())
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
						h.Memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
					}
				}
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.OS = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
		h.Hostname = unix.ByteSliceToString(u.Nodename[:])
	}
	return h
}

// LoadAvg is /proc/loadavg's first three fields ("" when unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Environment is the passport printed at the top of every report and
// stored in the JSON document.
type Environment struct {
	Host      Host     `json:"host"`
	Generator Profile  `json:"generator"`
	Systems   []System `json:"systems"`
	// DataDir is the data directory the storage probe (bench disk)
	// measured, with its storage.
	DataDir        string `json:"data_dir,omitempty"`
	DataDirStorage string `json:"data_dir_storage,omitempty"`
	LoadBefore     string `json:"loadavg_before"`
	LoadAfter      string `json:"loadavg_after,omitempty"`
	Durability     string `json:"durability"`
}
