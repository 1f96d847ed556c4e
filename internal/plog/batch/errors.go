package batch

import (
	"errors"
	"fmt"
)

// Kind classifies why a batch was rejected, which decides the error code a
// producer gets.
type Kind uint8

const (
	// KindCorrupt: the bytes fail the batch's own integrity checks (the
	// batch length does not frame the bytes, an unknown magic, a CRC
	// mismatch), so they are not what the producer sent. The server answers
	// CORRUPT_MESSAGE, which clients retry.
	KindCorrupt Kind = iota + 1
	// KindInvalid: the bytes are intact (the CRC matches, so the producer
	// really sent them) but Sushka refuses them: control batches from a
	// producer, a transactional batch without a producer id, a bad record
	// count, records that do not parse. Resending the
	// same bytes cannot help, so the server answers INVALID_RECORD, which
	// clients do not retry. Kafka classifies bad record counts and
	// malformed records the same way.
	KindInvalid
)

func (k Kind) String() string {
	switch k {
	case KindCorrupt:
		return "corrupt"
	case KindInvalid:
		return "invalid"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Sentinels matching an *Error of the corresponding Kind with errors.Is.
var (
	ErrCorrupt       = errors.New("corrupt record batch")
	ErrInvalidRecord = errors.New("invalid record batch")
)

// Error describes what is wrong with a batch and where.
type Error struct {
	Kind Kind
	// Pos is the byte offset of the offending field from the start of the
	// batch (for Split: from the start of the record set; for a problem in
	// compressed records: OffsetRecords, with the position in the
	// decompressed records in Msg).
	Pos int
	Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s record batch at byte %d: %s", e.Kind, e.Pos, e.Msg)
}

// Is makes errors.Is(err, ErrCorrupt) and errors.Is(err, ErrInvalidRecord)
// match by Kind.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrCorrupt:
		return e.Kind == KindCorrupt
	case ErrInvalidRecord:
		return e.Kind == KindInvalid
	}
	return false
}

// errorf builds an *Error. It is called on failure paths only, so the hot
// paths stay allocation-free.
func errorf(kind Kind, pos int, format string, args ...any) *Error {
	return &Error{Kind: kind, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}
