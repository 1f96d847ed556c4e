package stream_test

import "github.com/sushka-io/sushka/stream/memory"

func memoryTransport() *memory.Transport { return memory.New() }
