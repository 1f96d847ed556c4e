package streamproc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sushka-io/sushka/proc"
	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamproc"
)

type Payment struct {
	Cents int `json:"cents"`
}

// account is the entity of one key: its balance is its state, handed to
// its next incarnation when it passivates.
type account struct {
	id      string
	balance int
}

func (a *account) Receive(ctx *proc.Context, message any) error {
	m := message.(streamproc.Message[Payment])
	a.balance += m.Value.Cents
	fmt.Printf("%s: %+d at offset %d, balance %d\n", a.id, m.Value.Cents, m.Record.Offset, a.balance)
	return nil
}

func (a *account) State() any { return a.balance }

// Each key's messages go to the process of that key, which keeps its
// state between them; a message is acknowledged once its entity handled
// it.
func Example() {
	rt, _ := proc.New(proc.Options{})
	router, _ := rt.Spawn("", proc.NewEntities(streamproc.Options(proc.EntityOptions{
		IdleTimeout: time.Minute,
		New: func(key string, state any) proc.Entity {
			balance, _ := state.(int)
			return &account{id: key, balance: balance}
		},
	})), proc.SpawnOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 2)
	go func() { ran <- rt.Run(ctx) }()

	store := memory.New()
	for _, p := range []struct {
		key   string
		value string
	}{{"alice", `{"cents":500}`}, {"bob", `{"cents":200}`}, {"alice", `{"cents":-150}`}} {
		_ = store.Publish(ctx, &stream.Record{Topic: "payments", Partition: 0, Key: []byte(p.key), Value: []byte(p.value)})
	}
	app := stream.New(store.Connect(), stream.Group("accounts"))
	stream.Consume(app, "payments", streamproc.Route[Payment](rt, router))
	go func() { ran <- app.Run(ctx) }()
	for store.Committed("accounts", stream.TopicPartition{Topic: "payments", Partition: 0}) < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-ran
	<-ran
	// Output:
	// alice: +500 at offset 0, balance 500
	// bob: +200 at offset 1, balance 200
	// alice: -150 at offset 2, balance 350
}
