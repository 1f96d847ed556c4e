package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/sushka-io/sushka/internal/meta"
)

// placeReplicas assigns rf replicas to each of partitions partitions over
// the brokers given (the unfenced ones), as Kafka's AdminUtils does: round
// robin from a random start, each partition's followers shifted from its
// leader by an amount that grows every len(brokers) partitions, so leaders
// and followers both spread evenly. When the brokers are on more than one
// rack (a broker without a rack is on a rack of its own, ""), the brokers
// are taken in rack-alternating order and a partition gets a second replica
// on a rack only once every rack has one (Kafka's rack-aware placement).
// rf must be between 1 and len(brokers).
func placeReplicas(brokers []meta.Broker, partitions int32, rf int, rng *rand.Rand) ([][]int32, error) {
	n := len(brokers)
	if rf < 1 || rf > n {
		return nil, fmt.Errorf("%w: replication factor: %d larger than available brokers: %d", meta.ErrInvalidReplicationFactor, rf, n)
	}
	racks := map[string][]int32{}
	for _, b := range brokers {
		racks[b.Rack] = append(racks[b.Rack], b.ID)
	}
	arranged := rackAlternated(racks)
	rackOf := make(map[int32]string, n)
	for _, b := range brokers {
		rackOf[b.ID] = b.Rack
	}
	start, shift := rng.IntN(n), rng.IntN(n)
	out := make([][]int32, partitions)
	for p := range int(partitions) {
		if p > 0 && p%n == 0 {
			shift++
		}
		first := (p + start) % n
		replicas := make([]int32, 1, rf)
		replicas[0] = arranged[first]
		if len(racks) <= 1 {
			for j := range rf - 1 {
				replicas = append(replicas, arranged[replicaIndex(first, shift, j, n)])
			}
		} else {
			// Kafka's rack-aware loop: candidates in the shifted order,
			// skipping a broker whose rack already holds a replica until
			// every rack does.
			withRack := map[string]bool{rackOf[replicas[0]]: true}
			for k := 0; len(replicas) < rf; k++ {
				b := arranged[replicaIndex(first, shift*len(racks), k, n)]
				if (!withRack[rackOf[b]] || len(withRack) == len(racks)) && !slices.Contains(replicas, b) {
					replicas = append(replicas, b)
					withRack[rackOf[b]] = true
				}
			}
		}
		out[p] = replicas
	}
	return out, nil
}

// replicaIndex is AdminUtils.replicaIndex: the j-th follower's position for
// a leader at first, never first itself.
func replicaIndex(first, shift, j, n int) int {
	return (first + 1 + (shift+j)%(n-1)) % n
}

// rackAlternated lists the brokers one rack after another (racks sorted,
// brokers sorted within each), Kafka's getRackAlternatedBrokerList: with
// racks a: 1 2, b: 3, c: 4 5 it is 1 3 4 2 5.
func rackAlternated(racks map[string][]int32) []int32 {
	names := make([]string, 0, len(racks))
	total := 0
	for name, ids := range racks {
		names = append(names, name)
		slices.Sort(ids)
		total += len(ids)
	}
	slices.Sort(names)
	out := make([]int32, 0, total)
	for i := 0; len(out) < total; i++ {
		for _, name := range names {
			if ids := racks[name]; i < len(ids) {
				out = append(out, ids[i])
			}
		}
	}
	return out
}
