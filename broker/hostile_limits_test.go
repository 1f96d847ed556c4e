package broker

import "time"

// limits are the connection and memory limits the TestHostile... tests
// lower to observe them quickly. They are set through this one function so
// the tests read the same against any version of Config.
type limits struct {
	requestMemory       int64
	maxConnections      int
	maxConnectionsPerIP int
	idle, frame, write  time.Duration
}

func withLimits(cfg Config, l limits) Config {
	cfg.MaxRequestMemory = l.requestMemory
	cfg.MaxConnections = l.maxConnections
	cfg.MaxConnectionsPerIP = l.maxConnectionsPerIP
	cfg.IdleTimeout = l.idle
	cfg.FrameReadTimeout = l.frame
	cfg.WriteTimeout = l.write
	return cfg
}

// requestMemoryInUse is the request memory budget reserved now.
func requestMemoryInUse(tb *testBroker) int64 { return tb.srv.RequestMemoryInUse() }
