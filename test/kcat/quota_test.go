package kcat_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// TestProduceQuota: librdkafka (kcat) under producer_byte_rate is slowed to
// its quota, loses nothing (every line is read back), and another client id
// on the same broker is not slowed. The broker's window is Kafka's (11 ×
// 1 s), so the first ten windows' worth goes at once: 2 MB at 100 kB/s
// takes about (2 MB − 1.1 MB) / 100 kB/s = 9 s.
func TestProduceQuota(t *testing.T) {
	e := setup(t)
	e.sushka("", "topic", "create", "kq", "-p", "1")
	e.sushka("", "quota", "alter", "--client-id", "kcat-limited", "--add", "producer_byte_rate=100000")
	// 2,000 lines of 1,000 random hex digits: incompressible enough, and
	// librdkafka sends them uncompressed by default.
	var b strings.Builder
	for range 2000 {
		var raw [500]byte
		rand.Read(raw[:])
		b.WriteString(hex.EncodeToString(raw[:]))
		b.WriteByte('\n')
	}
	lines := b.String()
	produce := func(clientID string) time.Duration {
		start := time.Now()
		e.kc(lines, "-P", "-t", "kq", "-X", "client.id="+clientID, "-X", "linger.ms=5", "-X", "batch.size=65536")
		return time.Since(start)
	}
	free := produce("kcat-free")
	limited := produce("kcat-limited")
	t.Logf("2 MB: kcat-free %v, kcat-limited (100 kB/s) %v", free, limited)
	if limited < 5*time.Second {
		t.Errorf("kcat under a 100 kB/s quota produced 2 MB in %v: not throttled", limited)
	}
	if free > limited/2 {
		t.Errorf("kcat without a quota took %v, the throttled one %v", free, limited)
	}
	out := e.kc("", "-C", "-t", "kq", "-o", "beginning", "-e", "-q")
	if n := strings.Count(out, "\n"); n != 4000 {
		t.Fatalf("read back %d lines, want 4000 (nothing dropped)", n)
	}
}
