package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU is the user+system CPU time a process has used so far, read from
// /proc/PID/stat ("self" for this process). Resolution: 10 ms.
func ProcCPU(pid string) (time.Duration, error) {
	user, system, err := procTimes(pid)
	return user + system, err
}

// procTimes is a process's user and system CPU time so far.
func procTimes(pid string) (user, system time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%s/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("malformed /proc/%s/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%s/stat", pid)
	}
	return time.Duration(ut) * time.Second / clockTicks, time.Duration(st) * time.Second / clockTicks, nil
}

// CPUWatch measures the CPU a process used between Start and Stop.
type CPUWatch struct {
	pid        string
	cpu0, sys0 time.Duration
	wall0      time.Time
	err        error
}

// WatchCPU starts measuring pid ("self", or a number; "" or "0" measures
// nothing).
func WatchCPU(pid string) *CPUWatch {
	w := &CPUWatch{pid: pid, wall0: time.Now()}
	if pid == "" || pid == "0" {
		return w
	}
	user, system, err := procTimes(pid)
	w.cpu0, w.sys0, w.err = user+system, system, err
	return w
}

// CPUSample is the CPU a process used over a wall-clock window.
type CPUSample struct {
	CPU time.Duration `json:"cpu_ns"`
	// System is the part of CPU spent in the kernel (for a generator on
	// loopback: mostly the send path of the bytes to the broker).
	System time.Duration `json:"system_ns"`
	Wall   time.Duration `json:"wall_ns"`
	OK     bool          `json:"ok"`
}

// Stop reads the process's CPU time again.
func (w *CPUWatch) Stop() CPUSample {
	if w == nil || w.pid == "" || w.pid == "0" || w.err != nil {
		return CPUSample{}
	}
	user, system, err := procTimes(w.pid)
	if err != nil {
		return CPUSample{}
	}
	return CPUSample{CPU: user + system - w.cpu0, System: system - w.sys0, Wall: time.Since(w.wall0), OK: true}
}

// Cores is CPU over wall: how many cores the process kept busy.
func (s CPUSample) Cores() float64 {
	if !s.OK || s.Wall <= 0 {
		return 0
	}
	return s.CPU.Seconds() / s.Wall.Seconds()
}

// SecondsPerGB is CPU seconds per 10^9 payload bytes.
func (s CPUSample) SecondsPerGB(bytes int64) float64 {
	if !s.OK || bytes <= 0 {
		return 0
	}
	return s.CPU.Seconds() / (float64(bytes) / 1e9)
}

// ProcWriteBytes is the bytes a process caused to be written to storage so
// far (write_bytes of /proc/PID/io, counted when pages are dirtied).
func ProcWriteBytes(pid string) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "io"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no write_bytes in /proc/%s/io", pid)
}

// WriteSample is what a process wrote to storage over a wall-clock window.
type WriteSample struct {
	Bytes int64         `json:"bytes"`
	Wall  time.Duration `json:"wall_ns"`
	OK    bool          `json:"ok"`
}

// WriteWatch measures what a process wrote between Start and Stop.
type WriteWatch struct {
	pid   string
	b0    int64
	wall0 time.Time
	err   error
}

// WatchWrites starts measuring pid's writes ("" or "0": nothing).
func WatchWrites(pid string) *WriteWatch {
	w := &WriteWatch{pid: pid, wall0: time.Now()}
	if pid == "" || pid == "0" {
		w.err = fmt.Errorf("no pid")
		return w
	}
	w.b0, w.err = ProcWriteBytes(pid)
	return w
}

// Stop reads the process's write count again.
func (w *WriteWatch) Stop() WriteSample {
	if w.err != nil {
		return WriteSample{}
	}
	b, err := ProcWriteBytes(w.pid)
	if err != nil {
		return WriteSample{}
	}
	return WriteSample{Bytes: b - w.b0, Wall: time.Since(w.wall0), OK: true}
}

// machineTicks reads the first line of /proc/stat: busy and total ticks of
// all cores (idle and iowait are not busy).
func machineTicks() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("malformed /proc/stat")
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("malformed /proc/stat")
		}
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// MachineWatch measures how busy all the machine's cores were.
type MachineWatch struct {
	busy0, total0 uint64
	err           error
}

// WatchMachine starts measuring the machine's busy share.
func WatchMachine() *MachineWatch {
	w := &MachineWatch{}
	w.busy0, w.total0, w.err = machineTicks()
	return w
}

// Stop is the share (0–1) of all cores' time that was busy since the start,
// whoever used it; ok is false when it could not be read.
func (w *MachineWatch) Stop() (share float64, ok bool) {
	busy, total, err := machineTicks()
	if w.err != nil || err != nil || total <= w.total0 {
		return 0, false
	}
	return float64(busy-w.busy0) / float64(total-w.total0), true
}

// generatorCores is how many cores this process may use.
func generatorCores() int { return min(runtime.GOMAXPROCS(0), runtime.NumCPU()) }

// GeneratorSaturated says the generator kept ≥ 90% of its cores busy: its
// numbers then describe the generator, not the broker.
func GeneratorSaturated(s CPUSample) bool {
	return s.OK && s.Cores() >= 0.9*float64(generatorCores())
}

// ListenerPID finds the process listening on the TCP port of addr
// (host:port), from /proc/net/tcp{,6} and the socket links in
// /proc/*/fd. It returns "" when it cannot tell (another user's process,
// no such listener).
func ListenerPID(addr string) string {
	_, portStr, ok := strings.Cut(addr, ":")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		portStr = addr[i+1:]
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return ""
	}
	inodes := map[string]bool{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" { // 0A = LISTEN
				continue
			}
			_, p, ok := strings.Cut(fl[1], ":")
			if !ok {
				continue
			}
			if v, err := strconv.ParseUint(p, 16, 16); err == nil && v == port {
				inodes[fl[9]] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == self {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") && inodes[l[8:len(l)-1]] {
				return p.Name()
			}
		}
	}
	return ""
}
