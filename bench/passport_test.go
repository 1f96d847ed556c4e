package bench

import (
	"context"
	"net"
	"testing"
)

// TestServeRuntimeIsWhatFetchRuntimeReads: the document a peer serves on
// its admin listener (ServeRuntime) comes back whole from FetchRuntime.
func TestServeRuntimeIsWhatFetchRuntimeReads(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := PeerRuntime("peer under test", t.TempDir(), "fsync each batch")
	go ServeRuntime(l, want)
	got, err := FetchRuntime(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("fetched %+v, served %+v", got, want)
	}
}
