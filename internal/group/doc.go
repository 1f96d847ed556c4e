// Package group is Sushka's group coordinator (design D8, D9): consumer
// groups, their rebalances, and the committed offsets, as the Kafka
// protocol defines them.
//
// # A state machine apart from I/O
//
// The Coordinator holds every group's state and nothing else. It has no
// goroutines, no clock and does no I/O, in the style of etcd raft's RawNode:
// the caller feeds it inputs and collects what they caused.
//
//   - Handle(Request) takes one decoded request (a kmsg request type) with a
//     handle (Request.ID) and the current time.
//   - Tick(now) lets time pass: sessions expire, rebalance and sync
//     deadlines fire. NextDeadline says when the next one is due.
//   - Ready() returns, and forgets, what the inputs since the last Ready
//     produced: Records to persist and Responses to send.
//
// The Ready contract: the driver appends every Record of a Ready to the
// __consumer_offsets log, in order, and waits until they are durable
// (fsync'd) before it sends any of that Ready's Responses. A response may
// answer a request handed in long before (JoinGroup and SyncGroup wait for
// the rebalance to complete): Response.ID is the handle of its request. A
// request is answered exactly once, unless the coordinator is discarded.
// If persisting fails, the state in memory is ahead of the disk for the
// groups whose records were not written; the driver brings them back to
// what is durable (reload.go) and fails only the requests that depended
// on them: a record too large for any batch fails its group
// (ReloadGroup; UNKNOWN_SERVER_ERROR, INVALID_COMMIT_OFFSET_SIZE for
// OffsetCommit, as Kafka's GroupMetadataManager answers), a storage error
// fails a __consumer_offsets partition (UnloadPartition; NOT_COORDINATOR,
// Kafka's answer to KAFKA_STORAGE_ERROR) until its log can be reopened and
// replayed (LoadPartition). No failure is sticky for the coordinator.
//
// Load(records) replays the log at start-up, before the first request;
// until Loaded is called, requests are answered COORDINATOR_LOAD_IN_PROGRESS
// (FindCoordinator: COORDINATOR_NOT_AVAILABLE), as Kafka does while it reads
// a __consumer_offsets partition.
//
// # __consumer_offsets
//
// The internal topic holds Kafka's records, byte for byte: keys and values
// are the schemas of Kafka's OffsetCommitKey (version 1), OffsetCommitValue
// (version 3), GroupMetadataKey (version 2) and GroupMetadataValue (version
// 3); a record with a null value is a tombstone (an offset deleted, a group
// deleted). A group lives in partition PartitionFor(group) =
// abs(javaHashCode(group)) % partitions, Kafka's mapping, so a data
// directory could be read by Kafka's tools. Single node, one partition.
//
// The Store (store.go) keeps the partition logs under
// DATA/__consumer_offsets-N/ with internal/plog, appends with AckForced and
// replays them, and compacts them by snapshot (the live records appended
// again, then the log start advanced past the history); the Service (driver.go) is the single goroutine that owns
// a Coordinator and a Store.
//
// With ServiceConfig.Replicated the partitions are replicated ones
// (internal/replica) and the Service serves a partition's groups only
// while this node leads it: coordloop.Shards loads the partition from its
// log when elected and unloads it when it resigns (docs/replication.md
// 4d).
package group
