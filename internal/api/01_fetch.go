package api

import (
	"context"
	"encoding/binary"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// Fetch: v4-18
//
// Behavior:
// * The response is encoded here, not by kmsg (design D1, D5): record bytes
//   are never copied into a response struct; each partition's records are
//   file ranges of segment files, written to the socket with sendfile by the
//   server. The encoding is checked against kmsg.FetchResponse.ReadFrom for
//   every version in fetch_test.go.
// * MaxBytes / per-partition MaxBytes as in KIP-74: the first batch of the
//   first non-empty partition is returned even when larger than both.
// * Long poll (design D6): with fewer than MinBytes available the request
//   waits up to MaxWaitMillis on the partition logs' Wait channels, so an
//   append wakes it at once and an idle caught-up consumer costs nothing.
//   Any partition error answers at once.
// * Fetch sessions (KIP-227) are not kept: we answer SessionID 0, which
//   tells clients to send full requests; a request naming a session gets
//   FETCH_SESSION_ID_NOT_FOUND.
// * Isolation levels are accepted; with no transactions the last stable
//   offset is the high watermark.
//
// Version notes:
// * v4: LastStableOffset, AbortedTransactions, IsolationLevel; record batches
// * v5: LogStartOffset
// * v7: sessions (SessionID, SessionEpoch, ForgottenTopics), top-level ErrorCode
// * v9: CurrentLeaderEpoch; v11: Rack, PreferredReadReplica
// * v12: flexible versions; v13: TopicID instead of the topic name
// * v15-18: broker-only fields (ReplicaState, ReplicaDirectoryID, HighWatermark tags)

func init() { regKey(1, 4, 18, (*Handler).handleFetch) }

// fetchPart is one requested partition and, once read, its answer.
type fetchPart struct {
	topic      string
	topicID    [16]byte
	partition  int32
	offset     int64
	maxBytes   int64
	log        *plog.Log
	errorCode  int16
	hwm        int64
	logStart   int64
	result     plog.ReadResult
	haveResult bool
}

// fetchTopic groups a topic's partitions in request order.
type fetchTopic struct {
	name  string
	id    [16]byte
	parts []*fetchPart
}

func (h *Handler) handleFetch(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest) server.Response {
	if req.Version >= 7 && (req.SessionID != 0 || req.SessionEpoch > 0) {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return server.Response{Body: resp}
	}

	topics := make([]fetchTopic, len(req.Topics))
	var parts []*fetchPart
	for i, rt := range req.Topics {
		var t *topic
		if req.Version >= 13 {
			t = h.lookupID(rt.TopicID)
		} else {
			t = h.lookup(rt.Topic)
		}
		ft := &topics[i]
		ft.name, ft.id = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			fp := &fetchPart{topic: rt.Topic, topicID: rt.TopicID, partition: rp.Partition, offset: rp.FetchOffset, maxBytes: int64(rp.PartitionMaxBytes), hwm: -1, logStart: -1}
			if t != nil {
				fp.topic = t.meta.Name
			}
			fp.log = t.partition(rp.Partition)
			if fp.log == nil {
				fp.errorCode = kerr.UnknownTopicOrPartition.Code
				if req.Version >= 13 && t == nil {
					fp.errorCode = kerr.UnknownTopicID.Code
				}
			}
			ft.parts = append(ft.parts, fp)
			parts = append(parts, fp)
		}
	}

	maxWait := time.Duration(req.MaxWaitMillis) * time.Millisecond
	deadline := time.Now().Add(maxWait)
	var (
		waits []<-chan struct{}
		timer *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		waits = waits[:0]
		for _, fp := range parts {
			if fp.log != nil && fp.errorCode == 0 {
				// Before reading, so an append after the read still wakes us.
				waits = append(waits, fp.log.Wait())
			}
		}
		total, anyError := h.readFetch(parts, int64(req.MaxBytes))
		remaining := time.Until(deadline)
		if total >= int64(req.MinBytes) || anyError || remaining <= 0 || len(waits) == 0 {
			break
		}
		releaseFetch(parts)
		if timer == nil {
			timer = time.NewTimer(remaining)
		} else {
			timer.Reset(remaining)
		}
		if !waitAny(ctx, timer.C, waits) {
			// The connection closed or the server is shutting down: answer
			// with what there is (nothing); the writer drops it if the
			// connection is gone.
			h.readFetch(parts, int64(req.MaxBytes))
			break
		}
	}

	var fetched int64
	for _, fp := range parts {
		for _, c := range fp.result.Chunks {
			fetched += c.Len
		}
	}
	if m := h.cfg.Metrics; m != nil && fetched > 0 {
		for _, fp := range parts {
			var n int64
			for _, c := range fp.result.Chunks {
				n += c.Len
			}
			if n > 0 {
				m.FetchedBytes(fp.topic, n)
			}
		}
	}
	frame := encodeFetch(req.Version, topics)
	frame.Release = func() { releaseFetch(parts) }
	return server.Response{Frame: frame}
}

// readFetch reads every partition within the response budget; it returns
// the bytes gathered and whether any partition has an error.
func (h *Handler) readFetch(parts []*fetchPart, maxBytes int64) (total int64, anyError bool) {
	if maxBytes <= 0 {
		maxBytes = 1<<31 - 1
	}
	for _, fp := range parts {
		if fp.log == nil {
			anyError = true
			continue
		}
		fp.errorCode = 0
		budget := min(fp.maxBytes, maxBytes-total)
		if budget <= 0 && total > 0 {
			// Out of response budget: report the partition's offsets only.
			fp.hwm, fp.logStart = fp.log.HighWatermark(), fp.log.LogStartOffset()
			continue
		}
		res, err := fp.log.Read(fp.offset, max(budget, 0), total == 0)
		if err != nil {
			fp.errorCode = errorCode(err)
			fp.hwm, fp.logStart = fp.log.HighWatermark(), fp.log.LogStartOffset()
			if fp.errorCode == kerr.KafkaStorageError.Code {
				h.log.Error("read failed", "topic", fp.topic, "partition", fp.partition, "offset", fp.offset, "err", err)
			}
			anyError = true
			continue
		}
		fp.result, fp.haveResult = res, true
		fp.hwm, fp.logStart = res.HighWatermark, res.LogStartOffset
		for _, c := range res.Chunks {
			total += c.Len
		}
	}
	return total, anyError
}

func releaseFetch(parts []*fetchPart) {
	for _, fp := range parts {
		if fp.haveResult {
			fp.result.Release()
			fp.result, fp.haveResult = plog.ReadResult{}, false
		}
	}
}

// waitAny blocks until one of waits is closed (true), the timer fires
// (true) or ctx ends (false).
func waitAny(ctx context.Context, timer <-chan time.Time, waits []<-chan struct{}) bool {
	if len(waits) == 1 {
		select {
		case <-waits[0]:
			return true
		case <-timer:
			return true
		case <-ctx.Done():
			return false
		}
	}
	cases := make([]reflect.SelectCase, 0, len(waits)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)})
	for _, w := range waits {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen != 0
}

// encodeFetch encodes a Fetch response body of the given version, with each
// partition's records as file pieces. It follows kmsg's FetchResponse
// AppendTo field by field.
func encodeFetch(version int16, topics []fetchTopic) *server.Frame {
	flexible := version >= 12
	nPieces, headerBytes := 1, 16
	for _, t := range topics {
		headerBytes += 24 + len(t.name)
		for _, fp := range t.parts {
			nPieces += 1 + len(fp.result.Chunks)
			headerBytes += 56
		}
	}
	var (
		buf    = make([]byte, 0, headerBytes)
		pieces = make([]server.Piece, 0, nPieces)
		start  int // start of buf not yet in a piece
	)
	arrayLen := func(n int) {
		if flexible {
			buf = kbin.AppendUvarint(buf, uint32(n+1))
		} else {
			buf = kbin.AppendArrayLen(buf, n)
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, 0) // ThrottleMillis (v1+)
	if version >= 7 {
		buf = binary.BigEndian.AppendUint16(buf, 0) // ErrorCode
		buf = binary.BigEndian.AppendUint32(buf, 0) // SessionID: no session
	}
	arrayLen(len(topics))
	for _, t := range topics {
		if version >= 13 {
			buf = append(buf, t.id[:]...)
		} else if flexible {
			buf = kbin.AppendCompactString(buf, t.name)
		} else {
			buf = kbin.AppendString(buf, t.name)
		}
		arrayLen(len(t.parts))
		for _, fp := range t.parts {
			buf = binary.BigEndian.AppendUint32(buf, uint32(fp.partition))
			buf = binary.BigEndian.AppendUint16(buf, uint16(fp.errorCode))
			buf = binary.BigEndian.AppendUint64(buf, uint64(fp.hwm))
			buf = binary.BigEndian.AppendUint64(buf, uint64(fp.hwm)) // LastStableOffset (v4+)
			if version >= 5 {
				buf = binary.BigEndian.AppendUint64(buf, uint64(fp.logStart))
			}
			// AbortedTransactions (v4+): null, there are no transactions.
			if flexible {
				buf = kbin.AppendUvarint(buf, 0)
			} else {
				buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
			}
			if version >= 11 {
				buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // PreferredReadReplica -1
			}
			var n int64
			for _, c := range fp.result.Chunks {
				n += c.Len
			}
			// RecordBatches: nullable bytes; empty (not null) without data,
			// as Kafka sends.
			if flexible {
				buf = kbin.AppendUvarint(buf, uint32(n+1))
			} else {
				buf = binary.BigEndian.AppendUint32(buf, uint32(n))
			}
			if n > 0 {
				pieces = append(pieces, server.Piece{Bytes: buf[start:len(buf):len(buf)]})
				start = len(buf)
				for _, c := range fp.result.Chunks {
					pieces = append(pieces, server.Piece{File: c.File, Pos: c.Pos, Len: c.Len})
				}
			}
			if flexible {
				buf = append(buf, 0) // partition tagged fields
			}
		}
		if flexible {
			buf = append(buf, 0) // topic tagged fields
		}
	}
	if flexible {
		buf = append(buf, 0) // response tagged fields
	}
	pieces = append(pieces, server.Piece{Bytes: buf[start:]})
	return &server.Frame{Pieces: pieces}
}
