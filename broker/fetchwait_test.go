package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMaxFetchWaitCapsLongPolls: Config.MaxFetchWait reaches the fetch
// handler, so a client asking to wait 20 s is answered at the cap.
func TestMaxFetchWaitCapsLongPolls(t *testing.T) {
	tb := startBroker(t, Config{MaxFetchWait: 300 * time.Millisecond})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "waited", 1, "x")
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 20_000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "waited"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = 1, 1<<20 // at the end: nothing to return
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	start := time.Now()
	c := dialRaw(t, tb.AdvertisedAddr())
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = req.Version
	c.roundTrip(req, resp)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("fetch failed: %+v", resp)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("fetch answered after %s, want about the 300ms cap", took)
	}
}
