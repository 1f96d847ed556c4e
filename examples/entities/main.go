// Command entities is a supervised per-customer counter fed by records: the
// per-key entity pattern of the proc runtime over a plain channel source
// (until the stream framework can feed it).
//
// A router (proc.NewEntities) receives every record and sends it to the
// process named customer/<id>, spawning it on the customer's first record
// with the state last handed over for that customer. An entity passivates
// (hands its state to the router and stops) after -idle without records,
// so only active customers cost a process. A negative amount is a poison
// record: the entity fails, and the next record respawns it from its last
// handed-over state. The router runs under a one_for_one supervisor.
//
// Usage:
//
//	go run ./examples/entities -customers 1000 -records 100000 -idle 50ms
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/sushka-io/sushka/proc"
)

func main() {
	customers := flag.Int("customers", 1000, "distinct customer keys")
	records := flag.Int("records", 100_000, "records to feed")
	idle := flag.Duration("idle", 50*time.Millisecond, "idle time after which an entity passivates")
	poison := flag.Int("poison-every", 10_000, "make every n-th record a poison record (0: none)")
	flag.Parse()

	rt, err := proc.New(proc.Options{})
	if err != nil {
		fail(err)
	}
	ents, err := NewEntities(rt, *idle)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = rt.Run(ctx) }()

	// The source: a plain channel, fed by a generator, drained into the
	// runtime (Feed waits when the runtime's outside queue is full).
	source := make(chan Record, 1024)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 1; i <= *records; i++ {
			amount := 1 + rng.IntN(100)
			if *poison > 0 && i%*poison == 0 {
				amount = -1
			}
			source <- Record{Customer: fmt.Sprintf("c%04d", rng.IntN(*customers)), Amount: amount}
		}
		close(source)
	}()
	start := time.Now()
	for rec := range source {
		if err := ents.Feed(rec); err != nil {
			fail(err)
		}
	}
	report := make(chan map[string]counterState, 1)
	if err := ents.Flush(report); err != nil {
		fail(err)
	}
	totals := <-report
	elapsed := time.Since(start)
	sum, count := 0, 0
	for _, st := range totals {
		sum += st.Total
		count += st.Records
	}
	fmt.Printf("records fed: %d in %v\ncustomers: %d\nrecords counted: %d (a poison record loses its customer's records since the last hand-over)\nsum of amounts: %d\n",
		*records, elapsed.Round(time.Millisecond), len(totals), count, sum)
	cancel()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "entities:", err)
	os.Exit(1)
}
