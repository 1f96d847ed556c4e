package stream

import (
	"encoding/json"
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"
)

// A Codec turns a T into record bytes and back. Decode must not keep data
// beyond its return unless the codec documents it (Bytes does: the decoded
// slice is the record's own memory, valid while the handler runs). A
// failed Decode is an ordinary error: it goes to the handler's error path
// (ack policy, middlewares), never a panic.
type Codec[T any] interface {
	// Encode appends the encoding of v to dst.
	Encode(dst []byte, v T) ([]byte, error)
	// Decode sets *v from data. *v holds its zero value on entry.
	Decode(data []byte, v *T) error
}

// DecodeError wraps a codec's failure to decode a delivered record, so that
// middlewares (a dead-letter topic, say) can tell a poison message from a
// failing handler: retrying it is pointless.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("stream: decode %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// JSON is the encoding/json codec, the default for types that are not
// []byte, string or a protobuf message.
type JSON[T any] struct{}

func (JSON[T]) Encode(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func (JSON[T]) Decode(data []byte, v *T) error { return json.Unmarshal(data, v) }

// ContentType names the encoding in the AsyncAPI document; a Codec may
// implement it (ContentTyper).
func (JSON[T]) ContentType() string { return "application/json" }

// ContentTyper is implemented by codecs that know their MIME type.
type ContentTyper interface{ ContentType() string }

// Bytes passes record values through untouched: Decode does not copy, so
// the []byte a handler receives is the record's memory, valid while the
// handler runs.
type Bytes struct{}

func (Bytes) Encode(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (Bytes) Decode(data []byte, v *[]byte) error         { *v = data; return nil }
func (Bytes) ContentType() string                         { return "application/octet-stream" }

// String is the codec for text values (a copy: strings are immutable).
type String struct{}

func (String) Encode(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (String) Decode(data []byte, v *string) error         { *v = string(data); return nil }
func (String) ContentType() string                         { return "text/plain" }

// Proto is the codec for a protobuf message type M, used as a pointer:
// stream.Proto[pb.Order]() decodes into a fresh *pb.Order per record.
func Proto[M any, PM interface {
	*M
	proto.Message
}]() Codec[PM] {
	return protoCodec[M, PM]{}
}

type protoCodec[M any, PM interface {
	*M
	proto.Message
}] struct{}

func (protoCodec[M, PM]) Encode(dst []byte, v PM) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(dst, v)
}

func (protoCodec[M, PM]) ContentType() string { return "application/x-protobuf" }

func (protoCodec[M, PM]) Decode(data []byte, v *PM) error {
	m := PM(new(M))
	if err := proto.Unmarshal(data, m); err != nil {
		return err
	}
	*v = m
	return nil
}

// reflectProto serves a protobuf message type found by reflection when the
// handler names no codec (T is some *pb.X only known as a proto.Message).
type reflectProto[T any] struct{ elem reflect.Type }

func (c reflectProto[T]) Encode(dst []byte, v T) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(dst, any(v).(proto.Message))
}

func (reflectProto[T]) ContentType() string { return "application/x-protobuf" }

func (c reflectProto[T]) Decode(data []byte, v *T) error {
	m := reflect.New(c.elem).Interface()
	if err := proto.Unmarshal(data, m.(proto.Message)); err != nil {
		return err
	}
	*v = m.(T)
	return nil
}

// DefaultCodec chooses the codec for T when the handler names none:
// []byte and string pass through, protobuf messages use proto, the rest
// JSON.
func DefaultCodec[T any]() Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(Bytes{}).(Codec[T])
	case string:
		return any(String{}).(Codec[T])
	case proto.Message:
		t := reflect.TypeFor[T]()
		if t.Kind() == reflect.Pointer {
			return reflectProto[T]{elem: t.Elem()}
		}
	}
	return JSON[T]{}
}
