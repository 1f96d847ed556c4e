package nats

import (
	"bytes"
	"testing"

	"github.com/sushka-io/sushka/stream"
)

// TestEncodeValueRoundTrip: every value comes back byte for byte, and
// header-safe text travels as itself.
func TestEncodeValueRoundTrip(t *testing.T) {
	cases := []struct {
		value []byte
		plain bool
	}{
		{[]byte("order-1"), true},
		{[]byte(""), true},
		{[]byte("a b"), true},
		{[]byte(" leading"), false},
		{[]byte("two\nlines"), false},
		{[]byte("cr\r"), false},
		{[]byte{0, 1, 0xff}, false},
		{[]byte("ключ"), false},
		{[]byte("base64:AAAA"), false},
		{[]byte("base64:"), false},
	}
	for _, tc := range cases {
		enc := encodeValue(tc.value)
		if (enc == string(tc.value)) != tc.plain {
			t.Errorf("%q encoded as %q; plain want %v", tc.value, enc, tc.plain)
		}
		if got := decodeValue(enc); !bytes.Equal(got, tc.value) {
			t.Errorf("%q -> %q -> %q", tc.value, enc, got)
		}
	}
	// A foreign header that merely starts with the prefix stays as it is.
	if got := decodeValue("base64:not base64!"); string(got) != "base64:not base64!" {
		t.Errorf("decoded a foreign value to %q", got)
	}
}

// TestDecodeKeyOnlyAllocs: the delivery path's header decoding of a keyed
// record without headers allocates the key and nothing else.
func TestDecodeKeyOnlyAllocs(t *testing.T) {
	h, err := encodeHeaders(&stream.Record{Key: []byte("customer-7")})
	if err != nil {
		t.Fatal(err)
	}
	var rec stream.Record
	allocs := testing.AllocsPerRun(1000, func() { decodeHeaders(h, &rec) })
	if allocs > 1 {
		t.Fatalf("%.1f allocations to decode a key, want at most 1", allocs)
	}
	if string(rec.Key) != "customer-7" || rec.Headers != nil {
		t.Fatalf("decoded %q %v", rec.Key, rec.Headers)
	}
}
