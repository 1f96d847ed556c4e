package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// startBroker starts a single-node broker on 127.0.0.1 for the test.
func startBroker(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
