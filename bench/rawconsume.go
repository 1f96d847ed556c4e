package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The raw consumer's fetch sizes are the Java consumer's and franz-go's
// defaults (fetch.max.bytes, max.partition.fetch.bytes), and its wait
// the franz-go engine's (Consume).
const (
	rawFetchMaxBytes          = 50 << 20
	rawFetchMaxPartitionBytes = 1 << 20
	rawFetchMaxWait           = 500 * time.Millisecond
)

// RawConsume reads want records of topic from the start with the raw
// engine: connections to the partitions' leaders (o.Connections, at least
// one per leader), each with one Fetch in flight (as a Kafka consumer has
// per broker), sessionless (session 0, epoch -1: every fetch in full),
// read_uncommitted. Records are counted by walking each batch (their value
// bytes for uncompressed batches; recordCount × recordSize otherwise).
// The window opens at the first record, as Consume's does.
func RawConsume(ctx context.Context, brokers, topic string, want int64, recordSize int, timeout time.Duration, o RawOptions) (ConsumeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	cl, err := discoverRaw(ctx, brokers, topic)
	if err != nil {
		return ConsumeResult{}, err
	}
	addrs, parts := cl.assign(max(o.Connections, 1))
	var (
		records, valueBytes atomic.Int64
		first, last         atomic.Int64 // unix nanos
		wg                  sync.WaitGroup
		errOnce             sync.Once
		firstErr            error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	var conns []*rawConn
	defer func() {
		for _, c := range conns {
			c.c.Close()
		}
	}()
	for i, addr := range addrs {
		c, err := dialRaw(ctx, addr)
		if err != nil {
			return ConsumeResult{}, err
		}
		conns = append(conns, c)
		f := &rawFetcher{conn: c, topic: topic, partitions: parts[i], offsets: make([]int64, len(parts[i])),
			version: cl.versions[1], recordSize: int64(recordSize)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && records.Load() < want {
				n, b, err := f.fetch(ctx)
				if err != nil {
					fail(err)
					return
				}
				if n > 0 {
					now := time.Now().UnixNano()
					first.CompareAndSwap(0, now)
					last.Store(now)
					records.Add(n)
					valueBytes.Add(b)
				}
			}
		}()
	}
	// A fetcher blocked in a read when the others finished (or the time
	// ran out) is released by closing the connections.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, c := range conns {
			c.c.Close()
		}
		<-done
	}
	r := ConsumeResult{Records: records.Load(), Bytes: valueBytes.Load()}
	if f := first.Load(); f > 0 {
		r.Elapsed = time.Duration(last.Load() - f)
		r.Total = time.Unix(0, last.Load()).Sub(start)
	}
	if firstErr != nil && !errors.Is(firstErr, context.Canceled) {
		return r, firstErr
	}
	if r.Records < want {
		return r, fmt.Errorf("consumed %d of %d records of %s before the timeout", r.Records, want, topic)
	}
	return r, nil
}

// rawFetcher is one connection's fetch loop state.
type rawFetcher struct {
	conn       *rawConn
	topic      string
	partitions []int32
	offsets    []int64
	version    int16
	recordSize int64
	req        []byte
}

// fetch sends one Fetch and counts what it returned.
func (f *rawFetcher) fetch(ctx context.Context) (records, valueBytes int64, err error) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(f.version)
	req.MaxWaitMillis = int32(rawFetchMaxWait / time.Millisecond)
	req.MinBytes, req.MaxBytes = 1, rawFetchMaxBytes
	req.SessionID, req.SessionEpoch = 0, -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = f.topic
	for i, p := range f.partitions {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, f.offsets[i], rawFetchMaxPartitionBytes
		t.Partitions = append(t.Partitions, fp)
	}
	req.Topics = []kmsg.FetchRequestTopic{t}
	f.conn.corr++
	f.req = f.conn.fmt.AppendRequest(f.req[:0], req, f.conn.corr)
	if d, ok := ctx.Deadline(); ok {
		_ = f.conn.c.SetDeadline(d)
	}
	if _, err := f.conn.c.Write(f.req); err != nil {
		return 0, 0, fmt.Errorf("raw engine: Fetch to %s: %w", f.conn.addr, err)
	}
	frame, err := f.conn.readFrame()
	if err != nil {
		return 0, 0, fmt.Errorf("raw engine: Fetch from %s: %w", f.conn.addr, err)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(f.version)
	if err := parseResponse(frame, f.conn.corr, resp); err != nil {
		return 0, 0, fmt.Errorf("raw engine: Fetch from %s: %w", f.conn.addr, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("raw engine: Fetch from %s: %w", f.conn.addr, err)
	}
	index := map[int32]int{}
	for i, p := range f.partitions {
		index[p] = i
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			i, ok := index[rp.Partition]
			if !ok || rt.Topic != f.topic {
				return 0, 0, fmt.Errorf("raw engine: Fetch answered %s[%d], not asked", rt.Topic, rp.Partition)
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return 0, 0, fmt.Errorf("raw engine: Fetch %s[%d] at %d: %w", rt.Topic, rp.Partition, f.offsets[i], err)
			}
			n, b, next, err := countBatches(rp.RecordBatches, f.offsets[i], f.recordSize)
			if err != nil {
				return 0, 0, fmt.Errorf("raw engine: Fetch %s[%d] at %d: %w", rt.Topic, rp.Partition, f.offsets[i], err)
			}
			records, valueBytes, f.offsets[i] = records+n, valueBytes+b, next
		}
	}
	return records, valueBytes, nil
}

// countBatches walks the complete batches of a fetched partition (a
// partial batch at the end is the fetch's size limit, read again next
// time) and counts the records at or past from, skipping control batches
// (transaction markers). It returns the next offset to fetch.
func countBatches(b []byte, from, recordSize int64) (records, valueBytes, next int64, err error) {
	next = from
	for len(b) >= rawBatchHeaderLen {
		size := int(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		if size < rawBatchHeaderLen {
			return 0, 0, from, fmt.Errorf("batch length %d", size-12)
		}
		if size > len(b) {
			break
		}
		batch := b[:size]
		b = b[size:]
		if batch[16] != 2 {
			return 0, 0, from, fmt.Errorf("record batch magic %d (only v2 is walked)", batch[16])
		}
		base := int64(binary.BigEndian.Uint64(batch))
		attrs := binary.BigEndian.Uint16(batch[rawCRCStart:])
		lastDelta := int64(int32(binary.BigEndian.Uint32(batch[23:])))
		if base+lastDelta < from {
			continue
		}
		next = base + lastDelta + 1
		if attrs&0x20 != 0 { // control batch
			continue
		}
		count := int64(int32(binary.BigEndian.Uint32(batch[57:])))
		if attrs&0x7 != 0 { // compressed: not decompressed here
			records += count
			valueBytes += count * recordSize
			continue
		}
		n, vb, err := walkRecords(batch[rawBatchHeaderLen:], base, from, count)
		if err != nil {
			return 0, 0, from, err
		}
		records, valueBytes = records+n, valueBytes+vb
	}
	return records, valueBytes, next, nil
}

// walkRecords walks count uncompressed records, counting those at or past
// from and their value bytes.
func walkRecords(src []byte, base, from, count int64) (records, valueBytes int64, err error) {
	r := kbin.Reader{Src: src}
	for i := int64(0); i < count; i++ {
		length := r.Varint()
		rec := kbin.Reader{Src: r.Span(int(length))}
		rec.Int8()
		rec.Varlong()
		delta := rec.Varint()
		if k := rec.Varint(); k > 0 {
			rec.Span(int(k))
		}
		v := rec.Varint()
		if !r.Ok() || !rec.Ok() {
			return 0, 0, fmt.Errorf("record %d of the batch at %d is truncated", i, base)
		}
		if base+int64(delta) >= from {
			records++
			valueBytes += int64(max(v, 0))
		}
	}
	return records, valueBytes, nil
}
