package stream

import "time"

// Record is one message as a transport delivers it and as a Publisher sends
// it. On delivery the framework owns it until the handler returns: a handler
// that keeps Key, Value or Headers beyond its return must copy them, because
// a transport may reuse the memory (the memory transport never does, the
// Kafka transport gives every fetch fresh memory, but neither is promised).
type Record struct {
	Topic     string
	Partition int32 // on publish: AnyPartition lets the transport choose by key
	Offset    int64 // on publish: ignored; the broker assigns it
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time // on publish: zero means the time of sending
}

// AnyPartition in Record.Partition asks the transport to choose the
// partition: by the hash of the key when there is one, otherwise as the
// client spreads unkeyed records.
const AnyPartition int32 = -1

// Header is one record header. Kafka allows repeated keys; so does this.
type Header struct {
	Key   string
	Value []byte
}

// Header returns the value of the last header named key, and whether there
// is one (the last, because a middleware that overrides a header appends).
func (r *Record) Header(key string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}
