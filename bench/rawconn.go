package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The raw engine speaks the Kafka protocol itself, with kmsg's types for
// every request and response, so that the generator's own cost is what
// the protocol needs and nothing more: no client library between the
// schedule and the socket. rawConn is one connection; rawCluster the
// versions and partition leaders found before the clock starts.

// rawMaxVersions caps the versions the raw engine asks for: Produce and
// Fetch v13 name topics by id (KIP-516), which the engine does not track.
var rawMaxVersions = map[int16]int16{0: 12, 1: 12, 3: 12, 18: 3, 22: 4}

type rawConn struct {
	c    net.Conn
	addr string
	fmt  *kmsg.RequestFormatter
	corr int32
	rbuf []byte
}

func dialRaw(ctx context.Context, addr string) (*rawConn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raw engine: %w", err)
	}
	return &rawConn{c: c, addr: addr, fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("sushka-bench-raw"))}, nil
}

// roundTrip sends req and reads its response (set-up requests only: the
// load's requests are pipelined by rawProducer and rawFetcher).
func (c *rawConn) roundTrip(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > 30*time.Second {
		deadline = time.Now().Add(30 * time.Second)
	}
	_ = c.c.SetDeadline(deadline)
	defer c.c.SetDeadline(time.Time{})
	c.corr++
	if _, err := c.c.Write(c.fmt.AppendRequest(nil, req, c.corr)); err != nil {
		return nil, fmt.Errorf("raw engine: %s to %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	frame, err := c.readFrame()
	if err != nil {
		return nil, fmt.Errorf("raw engine: %s from %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	resp := req.ResponseKind()
	if err := parseResponse(frame, c.corr, resp); err != nil {
		return nil, fmt.Errorf("raw engine: %s from %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	return resp, nil
}

// readFrame reads one response frame into the connection's buffer (valid
// until the next call).
func (c *rawConn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.c, size[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(size[:])))
	if n < 4 || n > 1<<30 {
		return nil, fmt.Errorf("response frame of %d bytes", n)
	}
	if cap(c.rbuf) < n {
		c.rbuf = make([]byte, n)
	}
	c.rbuf = c.rbuf[:n]
	if _, err := io.ReadFull(c.c, c.rbuf); err != nil {
		return nil, err
	}
	return c.rbuf, nil
}

// parseResponse checks the correlation id, skips the header's tagged
// fields (flexible versions; ApiVersions keeps header v0) and decodes the
// body into resp, whose version must be set.
func parseResponse(frame []byte, corr int32, resp kmsg.Response) error {
	if got := int32(binary.BigEndian.Uint32(frame)); got != corr {
		return fmt.Errorf("correlation id %d, want %d: responses out of order", got, corr)
	}
	r := kbin.Reader{Src: frame[4:]}
	if resp.IsFlexible() && resp.Key() != 18 {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() {
		return fmt.Errorf("truncated response header")
	}
	return resp.ReadFrom(r.Src)
}

// rawCluster is what the engine learned before the clock starts.
type rawCluster struct {
	versions map[int16]int16 // api key → version to use
	// leaders holds each partition's leader address; partitions are 0..n-1.
	leaders []string
}

// discoverRaw asks the first broker of brokers for its versions and the
// topic's partition leaders.
func discoverRaw(ctx context.Context, brokers, topic string) (*rawCluster, error) {
	seed := strings.TrimSpace(strings.Split(brokers, ",")[0])
	c, err := dialRaw(ctx, seed)
	if err != nil {
		return nil, err
	}
	defer c.c.Close()
	cl := &rawCluster{versions: map[int16]int16{}}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(rawMaxVersions[18])
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sushka-bench", "raw"
	resp, err := c.roundTrip(ctx, av)
	if err != nil {
		return nil, err
	}
	avr := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(avr.ErrorCode); err != nil {
		return nil, fmt.Errorf("raw engine: ApiVersions from %s: %w", seed, err)
	}
	for _, k := range avr.ApiKeys {
		if want, ok := rawMaxVersions[k.ApiKey]; ok {
			cl.versions[k.ApiKey] = min(want, k.MaxVersion)
		}
	}
	for key := range rawMaxVersions {
		if _, ok := cl.versions[key]; !ok && key != 22 {
			return nil, fmt.Errorf("raw engine: %s does not serve %s", seed, kmsg.NameForKey(key))
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(cl.versions[3])
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = []kmsg.MetadataRequestTopic{mt}
	resp, err = c.roundTrip(ctx, md)
	if err != nil {
		return nil, err
	}
	mr := resp.(*kmsg.MetadataResponse)
	addrs := map[int32]string{}
	for _, b := range mr.Brokers {
		addrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	if len(mr.Topics) != 1 {
		return nil, fmt.Errorf("raw engine: Metadata for %s answered %d topics", topic, len(mr.Topics))
	}
	t := mr.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return nil, fmt.Errorf("raw engine: Metadata for %s: %w", topic, err)
	}
	cl.leaders = make([]string, len(t.Partitions))
	for _, p := range t.Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return nil, fmt.Errorf("raw engine: Metadata for %s[%d]: %w", topic, p.Partition, err)
		}
		addr, ok := addrs[p.Leader]
		if p.Partition < 0 || int(p.Partition) >= len(cl.leaders) || !ok {
			return nil, fmt.Errorf("raw engine: Metadata for %s[%d]: leader %d unknown", topic, p.Partition, p.Leader)
		}
		cl.leaders[p.Partition] = addr
	}
	return cl, nil
}

// assign splits the partitions into connections: every leader gets at
// least one connection (connections is raised to the number of leaders),
// and each connection takes its leader's partitions round robin.
func (cl *rawCluster) assign(connections int) (addrs []string, parts [][]int32) {
	var leaders []string
	byLeader := map[string][]int32{}
	for p, a := range cl.leaders {
		if _, ok := byLeader[a]; !ok {
			leaders = append(leaders, a)
		}
		byLeader[a] = append(byLeader[a], int32(p))
	}
	connections = max(connections, len(leaders))
	for i := 0; i < connections; i++ {
		addrs = append(addrs, leaders[i%len(leaders)])
		parts = append(parts, nil)
	}
	for _, a := range leaders {
		var mine []int
		for i, ca := range addrs {
			if ca == a {
				mine = append(mine, i)
			}
		}
		for j, p := range byLeader[a] {
			i := mine[j%len(mine)]
			parts[i] = append(parts[i], p)
		}
	}
	// A connection with no partition (more connections than partitions)
	// has nothing to send.
	var outA []string
	var outP [][]int32
	for i := range addrs {
		if len(parts[i]) > 0 {
			outA, outP = append(outA, addrs[i]), append(outP, parts[i])
		}
	}
	return outA, outP
}
