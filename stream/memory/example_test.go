package memory_test

import (
	"context"
	"fmt"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

// Keys map to partitions as on a broker; a group's committed offsets
// outlive its consumer.
func Example() {
	tr := memory.New(memory.Partitions(2))
	for _, key := range []string{"a", "b", "a"} {
		_ = tr.Publish(context.Background(), &stream.Record{Topic: "t", Partition: stream.AnyPartition, Key: []byte(key), Value: []byte(key)})
	}
	for _, r := range tr.Records("t") {
		fmt.Printf("%s -> partition %d offset %d\n", r.Key, r.Partition, r.Offset)
	}
	c, _ := tr.Consume(context.Background(), stream.ConsumerConfig{Group: "g", Topics: []string{"t"}})
	records, _ := c.Poll(context.Background(), make([]*stream.Record, 0, 10))
	for _, r := range records {
		c.Mark(stream.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset+1)
	}
	_ = c.Close(context.Background())
	fmt.Println("committed:", tr.Committed("g", stream.TopicPartition{Topic: "t", Partition: 0}),
		tr.Committed("g", stream.TopicPartition{Topic: "t", Partition: 1}))
	// Output:
	// a -> partition 0 offset 0
	// a -> partition 0 offset 1
	// b -> partition 1 offset 0
	// committed: 2 1
}
