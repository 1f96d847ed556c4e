package api

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// Client quotas (internal/quota) seen from the handlers, as Kafka's
// KafkaApis applies them:
//   - every request but SASL's counts its handler time against
//     request_percentage (acks=0 produce excepted, as Kafka);
//   - Produce counts its request bytes against producer_byte_rate once its
//     batches are queued to the logs, and over the quota mutes the
//     connection then (produceThrottle), before the next pipelined produce
//     of the connection starts: Kafka handles one request of a connection
//     at a time, so its throttle holds the next one;
//   - Fetch counts its response bytes against consumer_byte_rate before
//     answering, its maximum bytes bounded by what the quota allows in the
//     window; over either quota it answers an empty response instead (not
//     counted), as Kafka's getThrottledResponse.
//
// The larger throttle goes into the response's throttle_time_ms and mutes
// the connection (server.Response.ThrottleFor) after the response, which
// is sent at once (KIP-219). With no quota set, Handle costs one atomic
// load more.

// throttledHandle runs k's handler for req, measured against the quotas.
func (h *Handler) throttledHandle(ctx context.Context, k *apiKey, req *server.Request) server.Response {
	req.Accounting.Start = time.Now()
	resp := k.handle(h, ctx, req)
	user, clientID := req.Principal().Name, req.ClientID
	var throttle time.Duration
	switch req.Key {
	case 1: // Fetch measured itself (fetchThrottle): its answer depends on it
		return resp
	case 17, 36:
		// SaslHandshake and SaslAuthenticate: before authentication Kafka's
		// authenticator answers them, outside the quotas.
		return resp
	case 0:
		throttle = req.Accounting.Throttle // produceThrottle
		if body, ok := req.Body.(*kmsg.ProduceRequest); !ok || body.Acks != 0 {
			throttle = max(throttle, h.quotas.RecordRequestTime(user, clientID, req.Accounting.Busy()))
		}
	default:
		throttle = h.quotas.RecordRequestTime(user, clientID, req.Accounting.Busy())
	}
	if throttle > 0 {
		if t, ok := resp.Body.(kmsg.SetThrottleResponse); ok {
			t.SetThrottle(throttleMillis(throttle))
		}
		resp.ThrottleFor = throttle
	}
	return resp
}

// produceThrottle records a produce request's bytes against its
// producer_byte_rate, its batches queued, and over the quota mutes the
// connection at once (the response carries the throttle too).
func (h *Handler) produceThrottle(creq *server.Request) {
	if !h.quotas.Enabled() {
		return
	}
	d := h.quotas.RecordProduce(creq.Principal().Name, creq.ClientID, int64(creq.Size))
	if d > 0 {
		creq.Accounting.Throttle = d
		creq.MuteFor(d)
	}
}

func throttleMillis(d time.Duration) int32 {
	return int32(min(d.Milliseconds(), 1<<31-1))
}

// fetchMaxBytes bounds a fetch's maxBytes by what its consumer_byte_rate
// allows in the window (Kafka's getMaxValueInQuotaWindow).
func (h *Handler) fetchMaxBytes(creq *server.Request, maxBytes int64) int64 {
	if !h.quotas.Enabled() {
		return maxBytes
	}
	limit := h.quotas.FetchMaxBytes(creq.Principal().Name, creq.ClientID)
	if limit < 0 || (maxBytes > 0 && maxBytes <= limit) {
		return maxBytes
	}
	return max(limit, 1)
}

// fetchThrottle measures a fetch about to answer frame against the
// consumer_byte_rate and request_percentage quotas. Within both it returns
// false; over either it returns the empty response to send instead, with
// the throttle, and frame's bytes are not counted.
func (h *Handler) fetchThrottle(creq *server.Request, version int16, frame *server.Frame) (server.Response, bool) {
	if !h.quotas.Enabled() {
		return server.Response{}, false
	}
	user, clientID := creq.Principal().Name, creq.ClientID
	size := frame.Len()
	requestThrottle := h.quotas.RecordRequestTime(user, clientID, creq.Accounting.Busy())
	bytesThrottle := h.quotas.RecordFetch(user, clientID, size) // not counted if throttled
	if requestThrottle == 0 && bytesThrottle == 0 {
		return server.Response{}, false
	}
	if bytesThrottle == 0 {
		h.quotas.UnrecordFetch(user, clientID, size) // the empty answer replaces it
	}
	throttle := max(requestThrottle, bytesThrottle)
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(version)
	resp.ThrottleMillis = throttleMillis(throttle)
	return server.Response{Body: resp, ThrottleFor: throttle}, true
}
