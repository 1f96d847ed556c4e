package batch

import (
	"errors"
	"testing"
)

func TestControlRoundTrip(t *testing.T) {
	for _, commit := range []bool{false, true} {
		b := BuildControl(42, 3, commit, 7, 1700000000000)
		h, err := ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Control() || !h.Transactional() || h.ProducerID != 42 || h.ProducerEpoch != 3 || h.BaseSequence != -1 || h.NumRecords != 1 {
			t.Fatalf("header %+v", h)
		}
		if CRC(b) != h.CRC {
			t.Fatal("crc")
		}
		gotCommit, epoch, err := ParseControl(b)
		if err != nil || gotCommit != commit || epoch != 7 {
			t.Fatalf("ParseControl = %v %d %v, want %v 7", gotCommit, epoch, err, commit)
		}
		// A producer may not send it.
		if _, err := Validate(b); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("Validate(control) = %v, want an invalid record", err)
		}
	}
}

func TestTransactionalBatchValidates(t *testing.T) {
	b := Build(BuildOptions{Records: 3, ValueSize: 8, ProducerID: 5, ProducerEpoch: 1, Attributes: AttrTransactional})
	h, err := Validate(b)
	if err != nil || !h.Transactional() {
		t.Fatalf("Validate(transactional) = %+v, %v", h, err)
	}
}

func TestParseControlRefusesOtherRecords(t *testing.T) {
	b := BuildRecords([]KeyValue{{Key: []byte{0, 0, 0, 9}, Value: nil}}, 0, 0)
	if _, _, err := ParseControl(b); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("ParseControl(type 9) = %v", err)
	}
}
