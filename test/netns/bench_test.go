package netns

import (
	"io"
	"net"
	"testing"
)

// benchPaths runs bench once through the switch (node a to node b) and once
// inside node a (its own address: the kernel's path, no switch), each on a
// connection whose far end serve handles.
func benchPaths(b *testing.B, serve func(net.Conn), bench func(b *testing.B, conn net.Conn)) {
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
				if conn, err := l.Accept(); err == nil {
					serve(conn)
					conn.Close()
				}
			}()
			bench(b, mustDial(b, c.from, "tcp", l.Addr().String()))
		})
	}
}

// BenchmarkStream measures one TCP stream, 1 MiB writes, through the
// switch and inside a node:
//
//	go test -run '^$' -bench 'Stream|RoundTrip' -benchtime 1s ./test/netns/
func BenchmarkStream(b *testing.B) {
	benchPaths(b, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }, func(b *testing.B, conn net.Conn) {
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

// BenchmarkRoundTrip measures a one-byte TCP round trip (through the
// switch: two packets through it) against one inside a node.
func BenchmarkRoundTrip(b *testing.B) {
	benchPaths(b, func(c net.Conn) { _, _ = io.Copy(c, c) }, func(b *testing.B, conn net.Conn) {
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
