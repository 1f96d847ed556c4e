package kafka_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// TestExactlyOnceLostEndTxnAnswer: the answer to a transaction's EndTxn
// commit is lost (the connection drops after the request left, the broker
// committed). kgo sends EndTxn again on a new connection and Sushka
// answers the retry of a completed commit with success, so the results
// appear once: the transport neither stalls nor commits them again.
func TestExactlyOnceLostEndTxnAnswer(t *testing.T) {
	exactlyOnceLosingEndTxnAnswers(t, "lost-answer", 1) // the first transaction's EndTxn
}

// TestExactlyOnceEndTxnGivenUp: the answers to a transaction's EndTxn
// commit and to kgo's retry of it are both lost, and kgo gives up (one
// retry allowed), although the broker committed. The transport must not
// take the unknown outcome for an abort: it reads the group's committed
// offsets (OffsetFetch, RequireStable) and, finding its marks there, does
// not commit the same results again in the next transaction.
func TestExactlyOnceEndTxnGivenUp(t *testing.T) {
	// The first EndTxn commit's answer and its one retry's.
	exactlyOnceLosingEndTxnAnswers(t, "given-up", 2, kgo.RequestRetries(1))
}

// exactlyOnceLosingEndTxnAnswers runs an exactly-once service whose client
// loses the answers to the first lose EndTxn requests (the broker handles
// them) and checks that every result is visible to read_committed exactly
// once.
func exactlyOnceLosingEndTxnAnswers(t *testing.T, transactionalID string, lose int32, opts ...kgo.Opt) {
	addr := streamtest.StartSushka(t, 3)
	const n = 100
	publishInputs(t, addr, "in", n)
	left := &atomic.Int32{}
	left.Store(lose)
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &loseAnswersConn{Conn: conn, key: int16(kmsg.EndTxn), left: left}, nil
	}
	tr := kafka.New(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.TransactionTimeout(3 * time.Second),
		kgo.Dialer(dial)}, opts...),
		kafka.ConsumerOpts(kgo.FetchMaxWait(100*time.Millisecond)), kafka.CommitInterval(50*time.Millisecond),
		kafka.ExactlyOnce(transactionalID))
	app := stream.New(tr, stream.Group("g"))
	stream.Handle(app, "in", func(ctx context.Context, v string) (string, error) {
		time.Sleep(time.Millisecond)
		return "r" + v, nil
	}, stream.PublishTo("out"))
	stop := runApp(app)
	counts := readCommitted(t, addr, "out", n, time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if left.Load() > 0 {
		t.Fatal("fewer EndTxn answers were lost than planned: the test did not run its scenario")
	}
	checkOnce(t, deliveryMode{name: "exactly-once", exactlyOnce: true}, counts, n)
}

// loseAnswersConn closes its connection right after writing each request
// of key while *left is positive: the broker handles them, the client
// never learns the outcomes.
type loseAnswersConn struct {
	net.Conn
	key  int16
	left *atomic.Int32
}

func (c *loseAnswersConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil && len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == c.key && c.left.Add(-1) >= 0 {
		c.Conn.Close()
	}
	return n, err
}
