package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/server"
)

// twoListeners is a broker with a PLAINTEXT listener named INTERNAL and an
// SSL listener named EXTERNAL, each advertising its own address.
type twoListeners struct {
	*testBroker
	internal, external string // host:port of each
	clientTLS          *tls.Config
}

func startTwoListeners(t *testing.T) *twoListeners {
	t.Helper()
	dir := t.TempDir()
	set, err := certs.CreateSet(dir, "example", []string{"127.0.0.1"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := server.NewTLSConfig(server.TLSFiles{
		CertFile: filepath.Join(dir, certs.ServerCertFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile),
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	var ls [2]net.Listener
	for i := range ls {
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	li, le := ls[0], ls[1]
	b, err := New(Config{DataDir: t.TempDir(), Logger: testLogger(), Listeners: []Listener{
		{Name: "INTERNAL", Protocol: server.Plaintext},
		{Name: "EXTERNAL", Protocol: server.SSL, TLS: serverTLS},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBroker{Broker: b, t: t, done: make(chan error, 1)}
	go func() { tb.done <- b.ServeListener("INTERNAL", li) }()
	externalDone := make(chan error, 1)
	go func() { externalDone <- b.ServeListener("EXTERNAL", le) }()
	for len(b.Listeners()) != 2 || b.Listeners()[1].Advertised == "" || b.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() {
		tb.stop()
		if err := <-externalDone; err != ErrServerClosed {
			t.Errorf("EXTERNAL's serve returned %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AddCert(set.CA.Cert)
	return &twoListeners{testBroker: tb, internal: li.Addr().String(), external: le.Addr().String(),
		clientTLS: &tls.Config{RootCAs: pool}}
}

func (tl *twoListeners) dial(t *testing.T, external bool) *rawConn {
	t.Helper()
	if !external {
		return dialRaw(t, tl.internal)
	}
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tl.external, tl.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// TestListenersAdvertiseTheirOwnEndpoint: a client on each listener is
// told that listener's endpoint by Metadata, DescribeCluster and
// FindCoordinator (groups and transactions, batched and not), as Kafka
// does, and a franz-go client bootstrapped on the SSL listener produces
// and consumes in a group without ever being sent to the PLAINTEXT one.
func TestListenersAdvertiseTheirOwnEndpoint(t *testing.T) {
	tl := startTwoListeners(t)
	for _, external := range []bool{false, true} {
		want := tl.internal
		if external {
			want = tl.external
		}
		c := tl.dial(t, external)
		endpoint := func(what, host string, port int32) {
			t.Helper()
			if got := net.JoinHostPort(host, strconv.Itoa(int(port))); got != want {
				t.Fatalf("%s on the listener at %s names %s", what, want, got)
			}
		}

		md := kmsg.NewPtrMetadataRequest()
		md.Version = 12
		mdr := kmsg.NewPtrMetadataResponse()
		flexRoundTrip(t, c, md, mdr)
		if len(mdr.Brokers) != 1 {
			t.Fatalf("metadata brokers %+v", mdr.Brokers)
		}
		endpoint("Metadata", mdr.Brokers[0].Host, mdr.Brokers[0].Port)

		dc := kmsg.NewPtrDescribeClusterRequest()
		dcr := kmsg.NewPtrDescribeClusterResponse()
		flexRoundTrip(t, c, dc, dcr)
		endpoint("DescribeCluster", dcr.Brokers[0].Host, dcr.Brokers[0].Port)

		for _, typ := range []int8{0, 1} {
			// v3: one key; v4: batched keys (KIP-699).
			deadline := time.Now().Add(10 * time.Second)
			for {
				fc := kmsg.NewPtrFindCoordinatorRequest()
				fc.Version, fc.CoordinatorType, fc.CoordinatorKey = 3, typ, "g"
				fcr := kmsg.NewPtrFindCoordinatorResponse()
				flexRoundTrip(t, c, fc, fcr)
				if fcr.ErrorCode != 0 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond) // coordinator still loading
					continue
				}
				if fcr.ErrorCode != 0 {
					t.Fatalf("FindCoordinator type %d: error %d", typ, fcr.ErrorCode)
				}
				endpoint("FindCoordinator v3", fcr.Host, fcr.Port)
				break
			}
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, typ, []string{"a", "b"}
			fcr := kmsg.NewPtrFindCoordinatorResponse()
			flexRoundTrip(t, c, fc, fcr)
			for _, co := range fcr.Coordinators {
				endpoint("FindCoordinator v4", co.Host, co.Port)
			}
		}
	}

	dials := &dialHook{}
	cl := tl.client(kgo.SeedBrokers(tl.external), kgo.DialTLSConfig(tl.clientTLS), kgo.WithHooks(dials),
		kgo.ConsumerGroup("g-ssl"), kgo.ConsumeTopics("over-tls"), kgo.AllowAutoTopicCreation())
	ctx := ctxT(t, 20*time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "over-tls", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("consumed %v", recs)
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	dials.mu.Lock()
	defer dials.mu.Unlock()
	for _, addr := range dials.addrs {
		if addr != tl.external {
			t.Fatalf("the SSL client was sent to %s (dialled %v)", addr, dials.addrs)
		}
	}
	if len(dials.addrs) < 2 {
		t.Fatalf("dialled %v: the seed and the broker it was told of", dials.addrs)
	}
}

// TestListenersConfigRefusesContradictions: what New cannot serve as
// asked is refused with a message naming the listener.
func TestListenersConfigRefusesContradictions(t *testing.T) {
	for name, cfg := range map[string]Config{
		"duplicate name":        {Listeners: []Listener{{Name: "A"}, {Name: "A"}}},
		"SSL without TLS":       {Listeners: []Listener{{Protocol: server.SSL}}},
		"PLAINTEXT with TLS":    {Listeners: []Listener{{Protocol: server.Plaintext, TLS: &tls.Config{}}}},
		"AdvertisedAddr beside": {AdvertisedAddr: "h:1", Listeners: []Listener{{Protocol: server.Plaintext}}},
	} {
		cfg.DataDir = t.TempDir()
		if b, err := New(cfg); err == nil {
			b.Shutdown(context.Background())
			t.Errorf("%s: accepted", name)
		}
	}
}

// dialHook records the address of every connection a client opens.
type dialHook struct {
	mu    sync.Mutex
	addrs []string
}

func (h *dialHook) OnBrokerConnect(m kgo.BrokerMetadata, _ time.Duration, _ net.Conn, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addrs = append(h.addrs, net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port))))
}

// flexRoundTrip is rawConn.roundTrip for any version: a flexible
// response's header has a tag buffer after the correlation ID.
func flexRoundTrip(t *testing.T, c *rawConn, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	c.send(encodeRequest(req, 1))
	body, _, err := c.readResponse()
	if err != nil {
		t.Fatal(err)
	}
	if req.IsFlexible() {
		body = body[1:] // no tagged fields in our headers
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
}
