// Package txn is Sushka's transaction coordinator (KIP-98, KIP-360,
// KIP-447, KIP-890): transactional ids, their producer ids and epochs, and
// the state of each one's transaction, as Kafka's TransactionCoordinator
// defines them.
//
// # A state machine apart from I/O
//
// The Coordinator is shaped like internal/group's: no goroutines, no clock,
// no I/O inside (design D8).
//
//   - Handle(Request) takes one decoded request (InitProducerID with a
//     transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//     FindCoordinator for key type 1, DescribeTransactions,
//     ListTransactions, WriteTxnMarkers, or a Verify from Produce).
//   - Tick(now) lets time pass: an Ongoing transaction older than its
//     timeout is aborted with its epoch bumped (the producer is fenced, as
//     Kafka does), marker writes that failed are retried, and idle
//     transactional ids expire (transactional.id.expiration.ms).
//   - MarkersWritten(result) reports what the driver did with a marker job.
//   - Ready() returns, and forgets, what the inputs produced: Records to
//     persist, marker jobs to run once those records are durable, and
//     Responses to send once they are durable.
//
// The Ready contract: the driver appends every Record of a Ready to
// __transaction_state with AckForced and waits until they are fsync'd;
// only then does it start the Ready's Markers and send its Responses. A
// marker job writes a commit or abort marker (a control batch, durable) to
// every partition of a transaction and reports with MarkersWritten; the
// transaction then completes and the EndTxn that asked for it is
// answered: markers are durable in every partition before EndTxn answers.
// The completion record (CompleteCommit/CompleteAbort) is one of the
// Ready's Completions, which the driver persists after sending the
// responses and before anything later: its loss is repaired by the replay,
// which finds the transaction prepared and writes its markers again.
//
// The states are Kafka's: Empty → Ongoing (AddPartitionsToTxn,
// AddOffsetsToTxn) → PrepareCommit/PrepareAbort (EndTxn, a timeout, a new
// InitProducerID fencing an ongoing transaction; persisted before any
// marker) → CompleteCommit/CompleteAbort (after the markers) → Ongoing
// again; Dead when an id expires (its tombstone is written).
// PrepareEpochFence is never persisted: a fenced epoch goes straight into
// the PrepareAbort record.
//
// A restart replays the log (Load): a transaction found in PrepareCommit or
// PrepareAbort gets its markers written again (markers are idempotent for
// a partition that already ended that producer's transaction), an Ongoing
// one keeps its start time and so is aborted by its timeout.
//
// # __transaction_state
//
// Records are Kafka's, byte for byte: TransactionLogKey (version 0: the
// transactional id) and TransactionLogValue (version 1: producer id and
// epoch, timeout, state, partitions, timestamps; tagged previous/next
// producer id and client transaction version); a null value is a
// tombstone. An id lives in partition abs(javaHashCode(id)) % partitions,
// Kafka's mapping; single node, one partition. The Store is internal/kvlog's,
// shared with __consumer_offsets (compaction by snapshot).
package txn
