package api

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRequestPartitionsFindsEveryRepeat compares requestPartitions with a
// plain map on random requests around the scan/map threshold, for topics
// named by name and by ID.
func TestRequestPartitionsFindsEveryRepeat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []struct{ topics, partitions, names, numbers int }{
		{1, 1, 1, 1}, {1, 40, 1, 8}, {3, 10, 2, 12}, {40, 3, 20, 4}, {100, 5, 30, 3},
	} {
		t.Run(fmt.Sprintf("%+v", size), func(t *testing.T) {
			var r requestPartitions
			type want struct {
				topic     topicKey
				partition int32
			}
			firstTopic := map[topicKey]int32{}
			firstEntry := map[want]int32{}
			entries := int32(0)
			for i := range size.topics {
				tk := topicKey{name: fmt.Sprint("t", rng.IntN(size.names))}
				if i%2 == 1 {
					tk = topicKey{id: [16]byte{byte(rng.IntN(size.names))}}
				}
				wantTopic, ok := firstTopic[tk]
				if !ok {
					wantTopic = int32(i)
					firstTopic[tk] = wantTopic
				}
				if got := r.topic(tk); got != wantTopic {
					t.Fatalf("topic entry %d: first entry %d, want %d", i, got, wantTopic)
				}
				for range size.partitions {
					p := int32(rng.IntN(size.numbers))
					first, repeated := r.partition(wantTopic, p, entries)
					w, seen := firstEntry[want{tk, p}]
					switch {
					case repeated != seen:
						t.Fatalf("%v/%d: repeated %v, want %v", tk, p, repeated, seen)
					case seen && first != w:
						t.Fatalf("%v/%d: first entry %d, want %d", tk, p, first, w)
					case !seen:
						firstEntry[want{tk, p}] = entries
						entries++
					}
				}
			}
		})
	}
}
