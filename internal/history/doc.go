// Package history records what Kafka clients did against a broker (or a
// cluster) and checks the history, so that a fault test ends with one call
// that says whether anything acknowledged was lost or disagreed:
//
//	rec := history.NewRecorder()
//	p, _ := history.NewProducer(rec, "p1", kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()))
//	c, _ := history.NewConsumer(rec, "c1", "group", kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"))
//	… p.Produce(ctx, "t", value); c.Poll(ctx); faults …; p.Close(); c.Drain(ctx, "t")
//	history.Require(t, rec, history.Options{})
//
// The Recorder (safe for concurrent use) takes produce invocations and
// their outcomes (acknowledged at partition/offset, failed definitely, or
// failed indefinitely: a timeout or a lost connection may have appended
// the record), consumers' polls (which consumer, in which session), group
// commits and their acknowledgements, end offsets and fetched committed
// offsets, each stamped with a strictly increasing monotonic time. The
// helpers NewProducer and NewConsumer wrap franz-go clients so that a
// test records everything without writing it out.
//
// Check judges a history, after Jepsen's Kafka test (jepsen.tests.kafka):
// lost writes (an acknowledged record missing or replaced in a range a
// consumer session read through), unseen acknowledged records, records
// read only at another offset than acknowledged, inconsistent offsets (two
// values at one offset), nonmonotonic polls and poll skips within a
// session (skipping offsets nobody saw a record at is allowed: transaction
// markers take offsets consumers do not return; so are records recorded
// as aborted, ProduceAborted, which read_committed consumers skip),
// nonmonotonic sends (an idempotent producer's records to a partition
// acknowledged out of its order), phantoms (read, never produced), records read whose produce failed
// definitely, duplicates (an idempotent producer's must not exist; a
// non-idempotent producer's are counted apart), group commits going
// backwards, and linearizability of each partition as an append-only log
// (github.com/anishathalye/porcupine; the model is in linearizable.go).
//
// What it does not check: transactions' isolation (G0/G1, read-committed
// visibility of aborted records), order across partitions, and what no
// client observed (a record no consumer read is unseen, not lost; a
// session's reads define the range it vouches for). Values must be unique
// within a history.
//
// Require fails the test on any anomaly and keeps the history:
// history.jsonl (one event a line, ReadJSONLines reads it back),
// report.txt and porcupine's linearizability.html, in a directory of its
// own under $SUSHKA_HISTORY_ARTIFACTS, else $SUSHKA_TEST_ARTIFACTS/history,
// else testdata/history-artifacts/ of the test's package (git ignores it).
package history
