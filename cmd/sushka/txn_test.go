package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// TestTxnCommands: a transaction begun over the protocol shows in txn list
// (with its state and producer id, and filtered by state) and txn describe
// (epoch, timeout, partitions), and an open transaction's producer in txn
// producers.
func TestTxnCommands(t *testing.T) {
	b := testbroker.StartInProcess(t)
	runGroupCLI(t, b, "", "topic", "create", "tt", "-p", "2")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := "cli-tx"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 45000
	iresp, err := init.RequestWith(ctx, cl)
	if err != nil || iresp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v %+v", err, iresp)
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, iresp.ProducerID, iresp.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "tt", Partitions: []int32{1, 0}}}
	if _, err := add.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}

	if row := rowWith(runGroupCLI(t, b, "", "txn", "list"), id); len(row) < 3 || row[2] != "Ongoing" {
		t.Fatalf("txn list row %v", row)
	}
	if row := rowWith(runGroupCLI(t, b, "", "txn", "list", "--state", "CompleteCommit"), id); row != nil {
		t.Fatalf("txn list --state CompleteCommit lists the ongoing transaction: %v", row)
	}
	desc := runGroupCLI(t, b, "", "txn", "describe", id)
	for _, want := range []string{"STATE             Ongoing", "PRODUCER-EPOCH    0", "TIMEOUT           45s", "PARTITIONS        tt/0 tt/1"} {
		if !strings.Contains(desc, want) {
			t.Fatalf("txn describe lacks %q:\n%s", want, desc)
		}
	}
	// The open transaction's first batch shows in txn producers.
	prod, err := kgo.NewClient(kgo.SeedBrokers(b), kgo.TransactionalID("cli-producer"), kgo.DefaultProduceTopic("tt"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if row := rowWith(runGroupCLI(t, b, "", "txn", "producers", "tt"), "tt"); len(row) < 7 || row[1] != "1" || row[6] != "0" {
		t.Fatalf("txn producers row %v, want partition 1 with its transaction open from offset 0", row)
	}
	if _, errOut, err := runCLI(t, b, "", "txn", "describe", "nobody"); err == nil || !strings.Contains(err.Error()+errOut, "TRANSACTIONAL_ID_NOT_FOUND") {
		t.Fatalf("describe of an unknown id: %v %s", err, errOut)
	}
}
