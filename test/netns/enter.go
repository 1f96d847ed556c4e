package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread that has entered the node's network namespace,
// and returns f's error. A socket or device f creates belongs to the node
// for its whole life, wherever it is used afterwards; goroutines f starts
// do not run in the namespace. The thread goes back to the test process's
// namespace after f; if it cannot, it is discarded (it stays locked and
// ends with its goroutine) rather than reused by the runtime.
func (n *Node) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer unix.Close(back)
		if err := unix.Setns(n.nsFD, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: entering %s: %w", n.ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(back, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: leaving %s: %w", n.ns, err)
			return // still locked: the runtime ends this thread
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials address from inside the node, as a program on the
// node would: the connection crosses the Net with the node's faults. Its
// signature is kgo.Dialer's.
func (n *Node) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// Dialer returns DialContext with each dial bounded by timeout, for
// kgo.Dialer (kgo's DialTimeout bounds only kgo's own dialer: a dial into
// a partition otherwise waits for TCP to give up, minutes).
func (n *Node) Dialer(timeout time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return n.DialContext(ctx, network, address)
	}
}

// Listen listens on address inside the node (net.Listen's arguments).
func (n *Node) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenPacket is net.ListenPacket inside the node.
func (n *Node) ListenPacket(network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Do(func() error {
		var err error
		c, err = net.ListenPacket(network, address)
		return err
	})
	return c, err
}

// openTUN creates the TUN device name inside the node (a device belongs to
// the namespace of the thread that opened /dev/net/tun) and returns its
// descriptor, non-blocking so that the runtime's poller serves its reads
// and Close interrupts them. Raw IP packets, no packet-information header.
func (n *Node) openTUN(name string) (*os.File, error) {
	var f *os.File
	err := n.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), n.ns+"/"+name)
		return nil
	})
	return f, err
}
