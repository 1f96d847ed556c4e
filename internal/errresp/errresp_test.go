package errresp

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp/errresptest"
)

// tableKeys are the keys For must answer: every key the coordinators serve
// (08-16, 22, 24-28, 42, 47, 65, 66, 68, 69) and the admin and cluster keys
// internal/api refuses whole (48-51, 62, 63).
var tableKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 27, 28, 42, 47, 48, 49, 50, 51, 62, 63, 65, 66, 68, 69}

// TestEveryEntryCarriesItsCodeOnTheWire encodes each entry's answer at
// every version kmsg knows, to a request naming one of everything, decodes
// it and checks that the code reached the wire: at least one error code of
// the decoded answer is the code, none is another, and every item (an
// element of a list) carries it. An entry that loses the code at some
// version (OffsetFetch v0-1 had no top-level error code and answered
// nothing) or a key without an entry fails here.
func TestEveryEntryCarriesItsCodeOnTheWire(t *testing.T) {
	code := kerr.CoordinatorNotAvailable.Code
	var answered []int16
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		errresptest.FillOne(req)
		if For(req, code) == nil {
			if slices.Contains(tableKeys, key) {
				t.Errorf("%s (key %d): no error response", kmsg.NameForKey(key), key)
			}
			continue
		}
		answered = append(answered, key)
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			resp := For(req, code)
			resp.SetVersion(v)
			codes, items, err := errresptest.WireCodes(resp)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			if !slices.Contains(codes, code) {
				t.Errorf("%s v%d: no error code %d on the wire (codes %v)", kmsg.NameForKey(key), v, code, codes)
			}
			for _, c := range codes {
				if c != 0 && c != code {
					t.Errorf("%s v%d: error code %d besides %d", kmsg.NameForKey(key), v, c, code)
				}
			}
			for _, c := range items {
				if c != code {
					t.Errorf("%s v%d: an item answered %d, not %d", kmsg.NameForKey(key), v, c, code)
				}
			}
		}
	}
	if !slices.Equal(answered, tableKeys) {
		t.Errorf("keys with an error response: %v, want %v", answered, tableKeys)
	}
}

// TestUnknownTypeIsNil: a request type without an entry gets nil, never a
// bare response (error code 0).
func TestUnknownTypeIsNil(t *testing.T) {
	for _, req := range []kmsg.Request{kmsg.NewPtrProduceRequest(), kmsg.NewPtrFetchRequest(), kmsg.NewPtrMetadataRequest()} {
		if resp := For(req, kerr.UnknownServerError.Code); resp != nil {
			t.Errorf("%T: %T, want nil", req, resp)
		}
	}
}

// TestEntriesKeepKmsgDefaults: a field whose kmsg default is not zero (the
// protocol's default: AuthorizedOperations -2147483648, Kafka's
// AUTHORIZED_OPERATIONS_OMITTED; LeaderEpoch -1; Generation -1) keeps a
// non-zero value in every struct of every entry's answer, at every
// version, as the coordinators' own answers (kmsg.New…) and Kafka's
// getErrorResponse have it. A struct built as a literal instead loses the
// default: DescribeGroups answered AuthorizedOperations 0 (every
// operation denied) where the coordinator answered it omitted.
func TestEntriesKeepKmsgDefaults(t *testing.T) {
	code := kerr.CoordinatorNotAvailable.Code
	for _, key := range tableKeys {
		req := kmsg.RequestForKey(key)
		errresptest.FillOne(req)
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			for _, lost := range lostDefaults(reflect.ValueOf(For(req, code)).Elem()) {
				t.Errorf("%s v%d: %s", kmsg.NameForKey(key), v, lost)
			}
		}
	}
}

// lostDefaults lists the scalar fields of v and of the structs within it
// that are zero where their type's kmsg Default() is not.
func lostDefaults(v reflect.Value) []string {
	var lost []string
	switch v.Kind() {
	case reflect.Struct:
		def := reflect.New(v.Type())
		if d, ok := def.Interface().(interface{ Default() }); ok {
			d.Default()
		}
		def = def.Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			if !v.Type().Field(i).IsExported() {
				continue
			}
			switch f.Kind() {
			case reflect.Struct, reflect.Slice, reflect.Pointer:
				lost = append(lost, lostDefaults(f)...)
			case reflect.Map, reflect.Interface:
			default:
				if f.IsZero() && !def.Field(i).IsZero() {
					lost = append(lost, fmt.Sprintf("%s.%s is %v, kmsg's default %v", v.Type().Name(), v.Type().Field(i).Name, f, def.Field(i)))
				}
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := range v.Len() {
				lost = append(lost, lostDefaults(v.Index(i))...)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			lost = append(lost, lostDefaults(v.Elem())...)
		}
	}
	return lost
}
