package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/test/testbroker"
)

// TestMatrix runs the lesson's full matrix with a small record count against
// a single-node broker (so -rf 1) and checks that every scenario delivered
// every record, that the DISK column is filled and that the codecs shrink
// the logs the way the lesson says they do.
func TestMatrix(t *testing.T) {
	brokers := testbroker.StartInProcess(t)
	const n = 400
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := run(ctx, config{
		brokers:     []string{brokers},
		topicPrefix: "lecture-02-04-batching",
		partitions:  3,
		rf:          1,
		messages:    n,
		payload:     1024,
		timeout:     time.Minute,
	}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 9 {
		t.Fatalf("%d scenarios, want 9", len(results))
	}
	disk := map[string]int64{}
	for _, r := range results {
		if r.Failed != 0 || r.Sent != n || len(r.Errors) != 0 {
			t.Errorf("%s: sent %d failed %d errors %v", r.Scenario, r.Sent, r.Failed, r.Errors)
		}
		if len(r.Latencies) != n {
			t.Errorf("%s: %d latencies", r.Scenario, len(r.Latencies))
		}
		if r.DiskBytes <= 0 {
			t.Errorf("%s: DISK %d", r.Scenario, r.DiskBytes)
		}
		codec := r.Scenario[strings.LastIndexByte(r.Scenario, '=')+1:]
		disk[codec] = max(disk[codec], r.DiskBytes)
	}
	// n records of ~1 KiB uncompressed: at least n KiB on disk.
	if disk["none"] < n*1024 {
		t.Errorf("DISK for none = %d, want >= %d", disk["none"], n*1024)
	}
	// The records are half random hex: zstd must save a good part of it.
	if disk["zstd"] >= disk["none"]*9/10 {
		t.Errorf("DISK zstd %d not smaller than none %d", disk["zstd"], disk["none"])
	}
	table := out.String()[strings.Index(out.String(), "SCENARIO"):]
	for _, want := range []string{"linger=0ms  compression=none", "linger=5ms  compression=lz4", "linger=50ms compression=zstd", "P99.9", "DISK"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestPayloadsAreUniqueJSON(t *testing.T) {
	ps, err := orderPayloads(50, 1024)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if len(p) < 1000 || len(p) > 1030 {
			t.Fatalf("payload of %d bytes", len(p))
		}
		var v struct {
			Seq     int    `json:"seq"`
			ID      string `json:"id"`
			Event   string `json:"event"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if seen[v.ID] || v.Event != "order.created" {
			t.Fatalf("bad record %s", p)
		}
		seen[v.ID] = true
	}
}
