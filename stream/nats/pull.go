package nats

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pipelined pull requests. A topic has one subscription, on its inbox
// prefix with a wildcard, for its whole life, and sends its own pull
// requests to the durable's $JS.API.CONSUMER.MSG.NEXT subject, each with a
// reply subject of its own (inbox.<id>). So:
//
//   - several requests are outstanding at once (the next is sent when what
//     is fetched and not yet polled, plus what is asked and not yet
//     delivered, falls to FetchBatch/2, as nats.go's Consume/Messages do),
//     and one subscription delivers all of them in the order the server
//     sent them: the consumer's delivery order, so offsets stay in order
//     (the server spreads its deliveries over the waiting requests round
//     robin, so a message does not say which request it filled: only the
//     sum asked is counted down, as nats.go counts it);
//   - the server's status for a request (408 at its expiry, 409) comes on
//     that request's reply subject, with what it left undelivered
//     (Nats-Pending-Messages); a filled request ends silently, so all have
//     ended when nothing asked is left;
//   - a request is never abandoned while the server may still serve it: a
//     request the transport hears nothing more of (its 408 lost with the
//     connection) is taken as ended only after its expiry and as long again
//     (lostAfter), when the server has expired it; and a message of a
//     request taken as ended is still received (the subscription stays), so
//     nothing the server delivers is lost until AckWait. (nats.go's Fetch
//     gives up on a request after two missed idle heartbeats and
//     unsubscribes, dropping what it had received and not yet handed
//     over; on a loaded machine its heartbeat timer fired with the
//     messages already in its channel, or the server delivered into the
//     request it still had, and those messages came back only after
//     AckWait: TestServerRestartUnderConsumer's flake,
//     TestNothingLostWhileTheConnectionStalls.)
//
// Bounds: a request is sent only while the topic is not paused and asks
// for at most FetchBatch − (ready + asked), so fetched-and-unpolled plus
// asked-and-undelivered stays at most FetchBatch (plus, after a reconnect
// or a lost request, what a request taken as ended still delivers).

// pullRequest is a pull request of a topic that may be outstanding: no
// status ended it, and not everything asked has come.
type pullRequest struct {
	id     uint64
	lostAt time.Time // heard nothing of its end by then: taken as ended
}

// lostAfter is how long after it was sent a request whose end the
// transport did not hear of is taken as ended: its expiry, and as long
// again for a server (or a machine) slow to send the 408.
func (c config) lostAfter() time.Duration { return 2 * c.fetchExpiry }

// pullBody is the JSON of a pull request for batch messages expiring
// after expiry, appended to buf.
func pullBody(buf []byte, batch int, expiry time.Duration) []byte {
	buf = append(buf, `{"batch":`...)
	buf = strconv.AppendInt(buf, int64(batch), 10)
	buf = append(buf, `,"expires":`...)
	buf = strconv.AppendInt(buf, int64(expiry), 10)
	return append(buf, '}')
}

// pullSizeLocked is how many messages ts may ask for now (0: none).
func (c *consumer) pullSizeLocked(ts *topicState, now time.Time) int {
	if c.closing || c.fatal != nil || ts.paused || now.Before(ts.retryAt) {
		return 0
	}
	outstanding := len(ts.ready) + ts.asked
	if outstanding > c.n.cfg.fetchBatch/2 {
		return 0
	}
	return c.n.cfg.fetchBatch - outstanding
}

// expirePullsLocked takes as ended every request of ts past its lostAt,
// and returns the earliest lostAt of those left (zero: none).
func (c *consumer) expirePullsLocked(ts *topicState, now time.Time) time.Time {
	var next time.Time
	kept := ts.pulls[:0]
	for _, p := range ts.pulls {
		if !now.Before(p.lostAt) {
			continue
		}
		if next.IsZero() || p.lostAt.Before(next) {
			next = p.lostAt
		}
		kept = append(kept, p)
	}
	clear(ts.pulls[len(kept):])
	ts.pulls = kept
	settleLocked(ts)
	return next
}

// endPullLocked forgets request id, which left pending messages
// undelivered (a no-op for one already forgotten).
func endPullLocked(ts *topicState, id uint64, pending int) {
	for i, p := range ts.pulls {
		if p.id == id {
			ts.pulls = append(ts.pulls[:i], ts.pulls[i+1:]...)
			ts.asked = max(0, ts.asked-pending)
			break
		}
	}
	settleLocked(ts)
}

// deliveredLocked counts down what ts asked for by a message.
func deliveredLocked(ts *topicState) {
	ts.asked = max(0, ts.asked-1)
	settleLocked(ts)
}

// settleLocked keeps the invariant: nothing asked exactly when no request
// is outstanding.
func settleLocked(ts *topicState) {
	if ts.asked == 0 || len(ts.pulls) == 0 {
		clear(ts.pulls)
		ts.pulls, ts.asked = ts.pulls[:0], 0
	}
}

// lostPulls takes every outstanding request as ended: the connection
// they were sent on is gone (a reconnect), and the server drops the pull
// requests of a connection it lost, so new ones are needed at once.
func (c *consumer) lostPulls() {
	c.mu.Lock()
	for _, ts := range c.order {
		clear(ts.pulls)
		ts.pulls, ts.asked = ts.pulls[:0], 0
	}
	c.mu.Unlock()
	for _, ts := range c.order {
		signal(ts.wakeFetch)
	}
}

// fetchLoop sends ts's pull requests while there is room, and once Close
// has begun, waits for the outstanding ones to end, then naks what they
// delivered meanwhile (see linger) and returns.
func (c *consumer) fetchLoop(ts *topicState) {
	defer c.fetches.Done()
	defer c.nakLate(ts)
	retry := minRetry
	var body []byte
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop := c.fetchCtx.Done()
	for {
		now := time.Now()
		checkDurable := false
		c.mu.Lock()
		if ts.failed != nil {
			// The server refused a request (no responders while it starts,
			// MaxWaiting, ...): ask again later, a little later each time.
			// No responders is also the answer for a durable that is gone
			// (deleted while no request of ours was outstanding, so no
			// 409 told of it): look it up before asking again.
			c.n.cfg.logger.Warn("nats: pull request failed; retrying", "topic", ts.topic, "error", ts.failed, "retry_in", retry)
			checkDurable = errors.Is(ts.failed, natsclient.ErrNoResponders)
			ts.failed = nil
			ts.retryAt = now.Add(retry)
			retry = min(2*retry, maxRetry)
		} else if ts.answered {
			ts.answered = false
			retry = minRetry
		}
		wakeAt := c.expirePullsLocked(ts, now)
		batch := c.pullSizeLocked(ts, now)
		var id uint64
		if batch > 0 {
			if !c.n.nc.IsConnected() {
				batch = 0 // sent into the reconnect buffer it might outlive lostPulls; the reconnect wakes this loop
			} else {
				ts.pullsSent++
				id = ts.pullsSent
				ts.pulls = append(ts.pulls, pullRequest{id: id, lostAt: now.Add(c.n.cfg.lostAfter())})
				ts.asked += batch
			}
		}
		closing, retryAt := c.closing, ts.retryAt
		done := closing && len(ts.pulls) == 0
		c.mu.Unlock()
		if done || c.n.nc.IsClosed() {
			return // (a closed connection: maintain reports it)
		}
		if checkDurable && !closing {
			if err := c.durableGone(ts); err != nil {
				c.fail(err) // and no request from now on (pullSizeLocked)
			}
		}
		if closing {
			stop = nil // Close began: wait for the outstanding requests, each ends by its lostAt
		}
		if batch > 0 {
			body = pullBody(body[:0], batch, c.n.cfg.fetchExpiry)
			if err := c.n.nc.PublishRequest(ts.nextSubject, ts.replySubject(id), body); err != nil {
				c.mu.Lock()
				endPullLocked(ts, id, batch)
				ts.failed = err
				c.mu.Unlock()
			}
			continue
		}
		if now.Before(retryAt) && (wakeAt.IsZero() || retryAt.Before(wakeAt)) {
			wakeAt = retryAt
		}
		var wake <-chan time.Time
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
			wake = timer.C
		}
		select {
		case <-ts.wakeFetch:
		case <-wake:
		case <-stop:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// durableGone returns the error that stops the consumer when ts's durable
// (or its stream) no longer exists on the server, nil when it exists or
// the server could not say (JetStream still starting: retried as before).
// A standalone server accepts clients only once it has restored its
// streams and durables, so "not found" is not a restart's transient.
func (c *consumer) durableGone(ts *topicState) error {
	_, err := ts.jc.Info(c.fetchCtx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats: fetching %q: durable consumer %q: %w (%w)", ts.topic, ts.durable, jetstream.ErrConsumerDeleted, err)
	}
	if err != nil && c.fetchCtx.Err() == nil {
		c.n.cfg.logger.Warn("nats: looking up the durable after a refused pull request", "topic", ts.topic, "error", err)
	}
	return nil
}

// The retry interval after a refused pull request doubles from minRetry
// up to maxRetry.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = time.Second
)

// replySubject is the reply subject of ts's request id.
func (ts *topicState) replySubject(id uint64) string {
	return ts.inbox + "." + strconv.FormatUint(id, 10)
}

// onMessage is ts's subscription handler (nats.go calls it from one
// goroutine, in the order the messages came): a message of a request, or
// the server's status for one.
func (c *consumer) onMessage(ts *topicState) natsclient.MsgHandler {
	return func(m *natsclient.Msg) {
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			// On the request's own reply subject, inbox.<id>.
			id, _ := strconv.ParseUint(strings.TrimPrefix(m.Subject, ts.inbox+"."), 10, 64)
			pending, _ := strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
			c.onStatus(ts, id, pending, status, m.Header.Get("Description"))
			return
		}
		c.received(ts, m)
	}
}

// onStatus handles the server's status message for ts's request id.
func (c *consumer) onStatus(ts *topicState, id uint64, pending int, status, description string) {
	var failed, fatal error
	switch {
	case status == "100": // an idle heartbeat (not asked for): nothing ends
		return
	case status == "408", status == "404": // expired; no messages
	case status == "409" && strings.Contains(strings.ToLower(description), "consumer deleted"):
		fatal = fmt.Errorf("nats: fetching %q: %w", ts.topic, jetstream.ErrConsumerDeleted)
	case status == "409" && (strings.Contains(description, "Leadership Change") || strings.Contains(description, "Server Shutdown")):
		// The request is gone with its server or leader: ask again.
	case status == "503":
		failed = natsclient.ErrNoResponders // JetStream not (yet) serving the durable
	default:
		failed = errors.New("nats: pull request: " + status + " " + description)
	}
	c.mu.Lock()
	endPullLocked(ts, id, pending)
	if failed != nil {
		ts.failed = failed
	} else {
		ts.answered = true
	}
	c.mu.Unlock()
	if fatal != nil {
		c.fail(fatal)
	}
	signal(ts.wakeFetch)
}
