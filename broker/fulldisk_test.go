package broker

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// roundTrip sends req (a non-flexible version: response header v0) and
// decodes the response into resp.
func (c *rawConn) roundTrip(req kmsg.Request, resp kmsg.Response) {
	c.t.Helper()
	c.send(encodeRequest(req, 1))
	body, _, err := c.readResponse()
	if err != nil {
		c.t.Fatal(err)
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatal(err)
	}
}

func rawCreateTopic(t *testing.T, c *rawConn, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 4
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	var resp kmsg.CreateTopicsResponse
	c.roundTrip(req, &resp)
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create %s: %v", name, kerr.ErrorForCode(code))
	}
}

func rawDeleteTopic(c *rawConn, name string) int16 {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Version = 3
	req.TopicNames = []string{name}
	var resp kmsg.DeleteTopicsResponse
	c.roundTrip(req, &resp)
	return resp.Topics[0].ErrorCode
}

func rawCommit(c *rawConn, group string, offset int64) int16 {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 7
	req.Group, req.Generation = group, -1
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "keep", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset}}}}
	var resp kmsg.OffsetCommitResponse
	c.roundTrip(req, &resp)
	return resp.Topics[0].Partitions[0].ErrorCode
}

func rawFetchOffset(t *testing.T, c *rawConn, group string) int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 5
	req.Group = group
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "keep", Partitions: []int32{0}}}
	var resp kmsg.OffsetFetchResponse
	c.roundTrip(req, &resp)
	return resp.Topics[0].Partitions[0].Offset
}

func produceSome(t *testing.T, tb *testBroker, topic string, n int) {
	t.Helper()
	cl := tb.client(kgo.DefaultProduceTopic(topic))
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(context.Background(), kgo.StringRecord(strings.Repeat("v", 1000))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFullDiskFreesSpaceAndRecovers: on a full disk, DeleteRecords and
// DeleteTopics, the ways to free space, work; offset commits fail with
// NOT_COORDINATOR (nothing is acknowledged that is not durable); once
// there is room again the coordinator serves without a restart, and a
// restart sees exactly what was acknowledged.
func TestFullDiskFreesSpaceAndRecovers(t *testing.T) {
	mem := vfs.NewMem()
	disk := vfs.NewFullFS(mem, 1<<40)
	tb := startBroker(t, Config{FS: disk, DataDir: "/data"})
	c := dialRaw(t, tb.AdvertisedAddr())
	for _, name := range []string{"keep", "victim", "trim"} {
		rawCreateTopic(t, c, name, 1)
	}
	produceSome(t, tb, "trim", 20)
	produceSome(t, tb, "victim", 20)
	if code := rawCommit(c, "g", 1); code != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(code))
	}

	disk.SetCapacity(disk.Used()) // the disk is full
	if code := rawCommit(c, "g", 2); code != kerr.NotCoordinator.Code {
		t.Fatalf("commit on a full disk: %v, want NOT_COORDINATOR", kerr.ErrorForCode(code))
	}
	// A produce on the full disk fails (or is durable); either way the
	// partition's records can still be deleted.
	pr := kmsg.NewPtrProduceRequest()
	pr.Version, pr.Acks, pr.TimeoutMillis = 7, -1, 5000
	pr.Topics = []kmsg.ProduceRequestTopic{{Topic: "trim", Partitions: []kmsg.ProduceRequestTopicPartition{{
		Partition: 0, Records: batch.Build(batch.BuildOptions{Records: 10, ValueSize: 100 << 10, ProducerID: -1}),
	}}}}
	var prr kmsg.ProduceResponse
	c.roundTrip(pr, &prr)
	produced := int64(0)
	if code := prr.Topics[0].Partitions[0].ErrorCode; code == 0 {
		produced = 10
	} else if code != kerr.KafkaStorageError.Code {
		t.Fatalf("produce on a full disk: %v", kerr.ErrorForCode(code))
	}
	t.Logf("produce on a full disk: %v", kerr.ErrorForCode(prr.Topics[0].Partitions[0].ErrorCode))
	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.Version = 1
	dr.TimeoutMillis = 5000
	dr.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "trim", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: -1}}}}
	var drr kmsg.DeleteRecordsResponse
	c.roundTrip(dr, &drr)
	if p := drr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.LowWatermark != 20+produced {
		t.Fatalf("DeleteRecords on a full disk: %v, low watermark %d", kerr.ErrorForCode(p.ErrorCode), p.LowWatermark)
	}
	if code := rawDeleteTopic(c, "victim"); code != 0 {
		t.Fatalf("DeleteTopics on a full disk: %v", kerr.ErrorForCode(code))
	}

	disk.SetCapacity(1 << 40) // space is back
	deadline := time.Now().Add(10 * time.Second)
	for {
		code := rawCommit(c, "g", 3)
		if code == 0 {
			break
		}
		if code != kerr.NotCoordinator.Code || time.Now().After(deadline) {
			t.Fatalf("commit once space is back: %v", kerr.ErrorForCode(code))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The partition whose produce failed reports its (sticky) write error
	// at shutdown; that is the partition log's business, not this test's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := tb.Shutdown(ctx); err != nil && !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("shutdown: %v", err)
	}
	cancel()
	<-tb.done
	tb.Broker = nil

	tb = startBroker(t, Config{FS: disk, DataDir: "/data"})
	c = dialRaw(t, tb.AdvertisedAddr())
	if got := rawFetchOffset(t, c, "g"); got != 3 {
		t.Fatalf("after restart the offset is %d, want 3", got)
	}
	if code := rawDeleteTopic(c, "victim"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("the deleted topic after restart: %v", kerr.ErrorForCode(code))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 1
	lo.ReplicaID = -1
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "trim", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -2}}}}
	var lor kmsg.ListOffsetsResponse
	c.roundTrip(lo, &lor)
	if p := lor.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 20+produced {
		t.Fatalf("trim's log start after restart: %d (%v), want %d", p.Offset, kerr.ErrorForCode(p.ErrorCode), 20+produced)
	}
	if names, _ := mem.List("/data"); strings.Contains(strings.Join(names, " "), "victim") {
		t.Fatalf("the deleted topic's directories remain: %v", names)
	}
}

// TestDeleteTopicsCrash: a crash at any sync point of a DeleteTopics
// leaves either the whole topic (the deletion was not acknowledged) or no
// trace of it after the next start, and the other topics untouched.
func TestDeleteTopicsCrash(t *testing.T) {
	mem := vfs.NewMem()
	tb := startBroker(t, Config{FS: mem, DataDir: "/data"})
	c := dialRaw(t, tb.AdvertisedAddr())
	rawCreateTopic(t, c, "keep", 1)
	rawCreateTopic(t, c, "victim", 3)
	produceSome(t, tb, "victim", 5)
	var (
		mu     sync.Mutex
		images []*vfs.MemFS
	)
	rng := rand.New(rand.NewPCG(5, 5))
	images = append(images, mem.Crash(rng)) // before the deletion
	mem.SetSyncHook(func(vfs.Op, string) {
		mu.Lock()
		images = append(images, mem.Crash(rng))
		mu.Unlock()
	})
	if code := rawDeleteTopic(c, "victim"); code != 0 {
		t.Fatalf("delete: %v", kerr.ErrorForCode(code))
	}
	mem.SetSyncHook(nil)
	mu.Lock()
	defer mu.Unlock()
	gone := 0
	for i, image := range images {
		b, err := New(Config{FS: image, DataDir: "/data", Logger: testLogger()})
		if err != nil {
			t.Fatalf("crash point %d: %v", i, err)
		}
		names, _ := image.List("/data")
		dirs := strings.Join(names, " ")
		_, kept := b.catalog.Topic("victim")
		if _, ok := b.catalog.Topic("keep"); !ok || !strings.Contains(dirs, "keep-0") {
			t.Fatalf("crash point %d: topic keep damaged: %s (catalogue %v)", i, dirs, b.catalog.Topics())
		}
		switch {
		case kept && !(strings.Contains(dirs, "victim-0") && strings.Contains(dirs, "victim-1") && strings.Contains(dirs, "victim-2")):
			t.Fatalf("crash point %d: victim is in the catalogue without all its partitions: %s", i, dirs)
		case !kept && strings.Contains(dirs, "victim"):
			t.Fatalf("crash point %d: victim is deleted but left %s", i, dirs)
		case !kept:
			gone++
		}
		b.handler.Close()
		b.catalog.Close()
	}
	if gone == 0 {
		t.Fatalf("none of %d crash points had the deletion durable", len(images))
	}
	t.Logf("%d crash points, %d with the topic gone", len(images), gone)
}

// TestDeleteTopicsFailureUndoes: a deletion whose catalogue record cannot
// be made durable fails and leaves the topic whole and served, and after a
// restart too; a partition directory the catalogue does not know is never
// removed by a start.
func TestDeleteTopicsFailureUndoes(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, path string) error {
		if failing.Load() && op == vfs.OpSync && strings.HasSuffix(path, "metadata.log") {
			return vfs.ErrInjected
		}
		return nil
	}))
	mem.MkdirAll("/data/stranger-0", 0o755)
	tb := startBroker(t, Config{FS: fs, DataDir: "/data"})
	c := dialRaw(t, tb.AdvertisedAddr())
	rawCreateTopic(t, c, "victim", 2)
	produceSome(t, tb, "victim", 3)
	failing.Store(true)
	if code := rawDeleteTopic(c, "victim"); code != kerr.KafkaStorageError.Code {
		t.Fatalf("delete with a failing catalogue: %v", kerr.ErrorForCode(code))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 1
	lo.ReplicaID = -1
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "victim", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -1}, {Partition: 1, Timestamp: -1}}}}
	var lor kmsg.ListOffsetsResponse
	c.roundTrip(lo, &lor)
	var total int64
	for _, p := range lor.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("the topic after a failed deletion: %v", kerr.ErrorForCode(p.ErrorCode))
		}
		total += p.Offset
	}
	if total != 3 {
		t.Fatalf("the topic after a failed deletion has %d records, want 3", total)
	}
	failing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Shutdown(ctx) // the catalogue's failed fsync is reported; expected
	cancel()
	<-tb.done
	tb.Broker = nil

	tb = startBroker(t, Config{FS: mem, DataDir: "/data"})
	c = dialRaw(t, tb.AdvertisedAddr())
	lor = kmsg.ListOffsetsResponse{}
	c.roundTrip(lo, &lor)
	total = 0
	for _, p := range lor.Topics[0].Partitions {
		total += p.Offset
	}
	if total != 3 {
		t.Fatalf("after restart the topic has %d records, want 3", total)
	}
	if _, err := mem.Stat("/data/stranger-0"); err != nil {
		t.Fatalf("a directory the catalogue does not know was removed: %v", err)
	}
}
