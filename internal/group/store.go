package group

import "github.com/sushka-io/sushka/internal/kvlog"

// The __consumer_offsets store is internal/kvlog's Store (shared with
// __transaction_state): partition logs appended with AckForced, replayed at
// start-up, compacted by snapshot.

// Store is the __consumer_offsets topic.
type Store = kvlog.Store

// StoreConfig configures the __consumer_offsets logs; Topic is set by
// OpenStore.
type StoreConfig = kvlog.StoreConfig

// OpenStore opens (recovering) every partition of __consumer_offsets and
// returns the records in them, partition by partition, oldest first.
func OpenStore(cfg StoreConfig) (*Store, []Record, error) {
	cfg.Topic = OffsetsTopic
	return kvlog.OpenStore(cfg)
}
