package controller

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/meta"
)

func brokersOn(racks ...string) []meta.Broker {
	out := make([]meta.Broker, len(racks))
	for i, r := range racks {
		out[i] = meta.Broker{ID: int32(i), Rack: r}
	}
	return out
}

// TestPlacementSpread: without racks, every broker leads the same number
// of partitions and holds the same number of replicas (n partitions a
// multiple of the brokers), no partition names a broker twice, and the
// start is random (two seeds, two different first leaders).
func TestPlacementSpread(t *testing.T) {
	brokers := brokersOn("", "", "", "", "", "")
	for _, rf := range []int{1, 2, 3, 6} {
		replicas, err := placeReplicas(brokers, 60, rf, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		leaders, held := map[int32]int{}, map[int32]int{}
		// Followers of one leader spread too: pairs (leader, second).
		pairs := map[[2]int32]int{}
		for p, r := range replicas {
			if len(r) != rf {
				t.Fatalf("rf %d: partition %d has replicas %v", rf, p, r)
			}
			for i, b := range r {
				if slices.Contains(r[:i], b) {
					t.Fatalf("rf %d: partition %d names broker %d twice: %v", rf, p, b, r)
				}
				held[b]++
			}
			leaders[r[0]]++
			if rf > 1 {
				pairs[[2]int32{r[0], r[1]}]++
			}
		}
		for _, b := range brokers {
			if leaders[b.ID] != 10 || held[b.ID] != 10*rf {
				t.Fatalf("rf %d: broker %d leads %d and holds %d, want 10 and %d", rf, b.ID, leaders[b.ID], held[b.ID], 10*rf)
			}
		}
		if rf > 1 && len(pairs) < 5*len(brokers)/2 {
			t.Fatalf("rf %d: only %d distinct (leader, second replica) pairs: the followers do not shift", rf, len(pairs))
		}
	}
	firsts := map[int32]bool{}
	for seed := range uint64(8) {
		r, _ := placeReplicas(brokers, 1, 1, rand.New(rand.NewPCG(seed, seed)))
		firsts[r[0][0]] = true
	}
	if len(firsts) < 2 {
		t.Fatalf("8 seeds all start at broker %v: the start is not random", firsts)
	}
}

// TestPlacementRackAware: with racks, a partition's replicas are on
// distinct racks while there are racks without one, leaders alternate
// racks, and a replication factor above the brokers is refused.
func TestPlacementRackAware(t *testing.T) {
	brokers := brokersOn("a", "a", "b", "b", "c", "c", "c")
	rackOf := map[int32]string{}
	for _, b := range brokers {
		rackOf[b.ID] = b.Rack
	}
	for _, rf := range []int{2, 3, 4} {
		for seed := range uint64(5) {
			replicas, err := placeReplicas(brokers, 42, rf, rand.New(rand.NewPCG(seed, 7)))
			if err != nil {
				t.Fatal(err)
			}
			for p, r := range replicas {
				if racks, want := racksUsed(r, func(b int32) string { return rackOf[b] }), min(rf, 3); racks != want || len(r) != rf {
					t.Fatalf("rf %d seed %d: partition %d on %v: %d racks, want %d", rf, seed, p, r, racks, want)
				}
			}
		}
	}
	if got := rackAlternated(map[string][]int32{"a": {2, 1}, "b": {3}, "c": {5, 4}}); !slices.Equal(got, []int32{1, 3, 4, 2, 5}) {
		t.Fatalf("rack-alternated order %v, want Kafka's [1 3 4 2 5]", got)
	}
	_, err := placeReplicas(brokers, 1, 8, rand.New(rand.NewPCG(1, 1)))
	if !errors.Is(err, meta.ErrInvalidReplicationFactor) {
		t.Fatalf("rf 8 over 7 brokers: %v, want INVALID_REPLICATION_FACTOR", err)
	}
	if got, want := fmt.Sprint(err), "replication factor: 8 larger than available brokers: 7"; !strings.HasSuffix(got, want) {
		t.Fatalf("error %q does not end in Kafka's %q", got, want)
	}
}

// racksUsed is the number of distinct racks of replicas.
func racksUsed(replicas []int32, rackOf func(int32) string) int {
	on := map[string]bool{}
	for _, b := range replicas {
		on[rackOf(b)] = true
	}
	return len(on)
}
