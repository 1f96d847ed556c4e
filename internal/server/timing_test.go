package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// slowMetadata is stubHandler with Metadata (ordered) taking metadataDelay.
type slowMetadata struct{ stubHandler }

const metadataDelay = 30 * time.Millisecond

func (h *slowMetadata) Handle(ctx context.Context, req *Request) Response {
	if req.Key == 3 {
		time.Sleep(metadataDelay)
	}
	return h.stubHandler.Handle(ctx, req)
}

// TestOnResponseTiming: Config.OnResponse gets each response's queue wait
// (frame read → handler start: an ordered request waits for the previous
// one of its connection) and write wait (answer → written: a response
// waits for the responses before it in request order).
func TestOnResponseTiming(t *testing.T) {
	type timing struct {
		key             int16
		queued, written time.Duration
	}
	var (
		mu  sync.Mutex
		got []timing
	)
	s := New(Config{Handler: &slowMetadata{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnResponse: func(key int16, queued, written time.Duration) {
			mu.Lock()
			got = append(got, timing{key, queued, written})
			mu.Unlock()
		}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Shutdown(context.Background())
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Metadata 1 and 2 (ordered: 2 starts when 1 is done), then ApiVersions
	// 3, answered at once but written after both.
	var frames []byte
	frames = append(frames, frameOf(&kmsg.MetadataRequest{Version: 12}, 1)...)
	frames = append(frames, frameOf(&kmsg.MetadataRequest{Version: 12}, 2)...)
	frames = append(frames, frameOf(&kmsg.ApiVersionsRequest{Version: 3}, 3)...)
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	for i := int32(1); i <= 3; i++ {
		if corr := readCorr(t, c); corr != i {
			t.Fatalf("response %d has correlation id %d", i, corr)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("OnResponse called %d times, want 3: %+v", len(got), got)
	}
	first, second, third := got[0], got[1], got[2]
	if first.key != 3 || second.key != 3 || third.key != 18 {
		t.Fatalf("keys %d %d %d, want 3 3 18", first.key, second.key, third.key)
	}
	if second.queued < metadataDelay*9/10 {
		t.Errorf("second Metadata queued %v: it waited for the first (%v)", second.queued, metadataDelay)
	}
	if first.queued >= metadataDelay || third.queued >= metadataDelay {
		t.Errorf("queue waits %v and %v: nothing held those requests back", first.queued, third.queued)
	}
	if third.written < metadataDelay*9/10 {
		t.Errorf("ApiVersions written %v after its answer: it waited for both Metadata responses (%v each)", third.written, metadataDelay)
	}
}
