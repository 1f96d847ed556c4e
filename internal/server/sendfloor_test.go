package server

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sushka-io/sushka/internal/vfs"
)

// The kernel's floor of the consume path (issue 12, item 3): what sending
// page-cached file bytes over loopback TCP costs the sender's CPU per GB,
// with nothing of the broker's around it. A probe, not a test: run it with
//
//	go test ./internal/server -run TestSendFloor -send-floor -v
//
// The reader is another process (this test binary again), which reads and
// discards, so getrusage of this process is the sender's CPU alone (on
// loopback it includes the receive path's softirq run in the sender's
// context, as the broker's does). Modes, each with -send-floor-chunk bytes
// per call or per answer:
//   - sendfile, splice (file → pipe → socket), write (from a buffer in cache),
//     pread-write (the copying path): blocking system calls streamed to the reader;
//   - sendfile-go: the server's sendfile (non-blocking, Go's poller), streamed;
//   - rr-sendfile: request and answer as a raw fetch consumer does (one
//     request of 100 bytes, then a head, sendfile of chunk bytes and a tail,
//     blocking calls);
//   - rr-frame: the same through the server's writeFrame (sendmsg with
//     MSG_MORE, sendfile, writev), as the broker answers a fetch.
var (
	sendFloor      = flag.Bool("send-floor", false, "measure the kernel's send floor (TestSendFloor)")
	sendFloorModes = flag.String("send-floor-modes", "sendfile,sendfile-go,splice,write,pread-write,rr-sendfile,rr-frame", "TestSendFloor's modes")
	sendFloorChunk = flag.Int64("send-floor-chunk", 1<<20, "bytes per call (per answer for rr-*)")
	sendFloorBytes = flag.Int64("send-floor-bytes", 2<<30, "bytes sent per round and mode")
	sendFloorRound = flag.Int("send-floor-rounds", 3, "rounds (each mode once per round, after a discarded one)")
	sendFloorDir   = flag.String("send-floor-dir", "", "directory of the 256 MiB file sent (default: a temporary one)")
)

const sendFloorReaderEnv = "SUSHKA_SEND_FLOOR_READER"

func TestSendFloor(t *testing.T) {
	if addr := os.Getenv(sendFloorReaderEnv); addr != "" {
		sendFloorReader(addr, os.Getenv(sendFloorReaderEnv+"_RR") != "")
		return
	}
	if !*sendFloor {
		t.Skip("a probe: -send-floor runs it")
	}
	dir := *sendFloorDir
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "send-floor")
	const fileBytes = 256 << 20
	data := make([]byte, fileBytes)
	rand.Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	io.Copy(io.Discard, f) // in the page cache
	modes := strings.Split(*sendFloorModes, ",")
	perGB := map[string][]float64{}
	for round := 0; round <= *sendFloorRound; round++ {
		for _, mode := range modes {
			cpu, wall := sendFloorRun(t, f, fileBytes, mode)
			gb := float64(*sendFloorBytes) / 1e9
			if round == 0 {
				continue // calibration
			}
			perGB[mode] = append(perGB[mode], cpu.Seconds()/gb)
			t.Logf("round %d %-12s %.3f core-s/GB  %.2f GB/s", round, mode, cpu.Seconds()/gb, gb/wall.Seconds())
		}
	}
	var load string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.TrimSpace(string(b))
	}
	t.Logf("sender core-s/GB, best (median) [worst] of %d, %d bytes per call; loadavg %s", *sendFloorRound, *sendFloorChunk, load)
	for _, mode := range modes {
		v := perGB[mode]
		slices.Sort(v)
		t.Logf("  %-12s %.3f (%.3f) [%.3f]", mode, v[0], v[len(v)/2], v[len(v)-1])
	}
}

// sendFloorReader reads and discards: a stream, or (rr) answers framed by
// a 4-byte size, each after a 100-byte request.
func sendFloorReader(addr string, rr bool) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	buf := make([]byte, 1<<20)
	for {
		if rr {
			if _, err := c.Write(make([]byte, 100)); err != nil {
				return
			}
			if _, err := io.ReadFull(c, buf[:4]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, struct{ io.Reader }{c}, int64(binary.BigEndian.Uint32(buf))); err != nil {
				return
			}
		} else if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// sendFloorRun sends -send-floor-bytes of f to a fresh reader process in
// mode and returns this process's CPU time and the wall time.
func sendFloorRun(t *testing.T, f *os.File, fileBytes int64, mode string) (cpu, wall time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rr := strings.HasPrefix(mode, "rr-")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSendFloor$")
	cmd.Env = append(os.Environ(), sendFloorReaderEnv+"="+ln.Addr().String())
	if rr {
		cmd.Env = append(cmd.Env, sendFloorReaderEnv+"_RR=1")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := nc.(*net.TCPConn)
	// The blocking modes use a duplicate of the socket in blocking mode, on
	// a thread of their own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dup, err := tc.File()
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	sock := int(dup.Fd())
	if mode != "sendfile-go" && mode != "rr-frame" {
		unix.SetNonblock(sock, false)
	}
	chunk := *sendFloorChunk
	buf := make([]byte, chunk)
	var pipe [2]int
	if mode == "splice" {
		if err := unix.Pipe2(pipe[:], 0); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pipe[0])
		defer unix.Close(pipe[1])
		unix.FcntlInt(uintptr(pipe[1]), unix.F_SETPIPE_SZ, 1<<20)
	}
	w := progressWriter{nc: tc, timeout: 10 * time.Second}
	vf, err := vfs.Default.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer vf.Close()
	head, tail := make([]byte, 120), make([]byte, 3)
	request := make([]byte, 100)
	fd := int(f.Fd())
	must := func(err error) {
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
	}
	writeAll := func(b []byte) {
		for len(b) > 0 {
			n, err := unix.Write(sock, b)
			must(err)
			b = b[n:]
		}
	}
	start, cpu0 := time.Now(), rusageCPU()
	for sent, pos := int64(0), int64(0); sent < *sendFloorBytes; {
		n := min(chunk, *sendFloorBytes-sent, fileBytes-pos)
		if rr {
			if mode == "rr-frame" {
				_, err = io.ReadFull(tc, request)
			} else {
				_, err = io.ReadFull(dup, request)
			}
			must(err)
			binary.BigEndian.PutUint32(head, uint32(int64(len(head)-4)+n+int64(len(tail))))
		}
		switch mode {
		case "sendfile", "rr-sendfile":
			if rr {
				_, err := unix.SendmsgBuffers(sock, [][]byte{head}, nil, nil, unix.MSG_MORE)
				must(err)
			}
			for off, left := pos, n; left > 0; {
				m, err := unix.Sendfile(sock, fd, &off, int(left))
				must(err)
				left -= int64(m)
			}
			if rr {
				writeAll(tail)
			}
		case "sendfile-go":
			must(sendfile(w, tc, f, pos, n))
		case "rr-frame":
			must(writeFrame(w, head, &Frame{Pieces: []Piece{{File: vf, Pos: pos, Len: n}, {Bytes: tail}}}))
		case "splice":
			for off, left := pos, n; left > 0; {
				m, err := unix.Splice(fd, &off, pipe[1], nil, int(min(left, 1<<20)), unix.SPLICE_F_MOVE|unix.SPLICE_F_MORE)
				must(err)
				for k := m; k > 0; {
					o, err := unix.Splice(pipe[0], nil, sock, nil, int(k), unix.SPLICE_F_MOVE|unix.SPLICE_F_MORE)
					must(err)
					k -= o
				}
				left -= m
			}
		case "write":
			writeAll(buf[:n])
		case "pread-write":
			_, err := f.ReadAt(buf[:n], pos)
			must(err)
			writeAll(buf[:n])
		default:
			t.Fatalf("unknown mode %q", mode)
		}
		sent += n
		if pos += n; pos >= fileBytes {
			pos = 0
		}
	}
	return rusageCPU() - cpu0, time.Since(start)
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
