package netns

import (
	"context"
	"io"
	"testing"
	"time"
)

// BenchmarkStream measures one TCP stream through the switch (node a to
// node b) against the same stream inside node a (its own address: the
// kernel's loopback path, no switch), 1 MiB writes:
//
//	go test -run '^$' -bench Stream -benchtime 2s ./test/netns/
func BenchmarkStream(b *testing.B) {
	n := New(b, "a", "b")
	for _, c := range []struct {
		name     string
		from, to *Node
	}{
		{"switch", n.Node("a"), n.Node("b")},
		{"in-node", n.Node("a"), n.Node("a")},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := c.to.Listen("tcp", c.to.HostPort(0))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				conn, err := l.Accept()
				if err == nil {
					_, _ = io.Copy(io.Discard, conn)
					conn.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := c.from.DialContext(ctx, "tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := conn.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundTrip measures a one-byte TCP round trip through the switch
// (a to b and back: two packets through the switch) against one inside a
// node.
func BenchmarkRoundTrip(b *testing.B) {
	n := New(b, "a", "b")
	for _, c := range []struct {
		name     string
		from, to *Node
	}{
		{"switch", n.Node("a"), n.Node("b")},
		{"in-node", n.Node("a"), n.Node("a")},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := c.to.Listen("tcp", c.to.HostPort(0))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				conn, err := l.Accept()
				if err == nil {
					_, _ = io.Copy(conn, conn)
					conn.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := c.from.DialContext(ctx, "tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			one := []byte{1}
			b.ResetTimer()
			for range b.N {
				if _, err := conn.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, one); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
