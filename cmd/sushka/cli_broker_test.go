package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// startTestBroker starts a broker for the CLI tests on 127.0.0.1 and returns
// its address.
func startTestBroker(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
