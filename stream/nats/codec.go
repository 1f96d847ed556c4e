package nats

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	natsclient "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/stream"
)

// KeyHeader is the NATS header that carries a record's key. (Nats-Msg-Id
// is JetStream's deduplication id, not a key: two records of one key are
// two messages, so the key has a header of its own.) A record without a
// key (nil) has no KeyHeader; an empty key has it with an empty value.
const KeyHeader = "Sushka-Key"

// base64Prefix marks a header value that was not header-safe text: the
// rest is its standard base64 encoding. See encodeValue.
const base64Prefix = "base64:"

// encodeValue returns v as a NATS header value that comes back unchanged.
// NATS headers are text lines (as HTTP/1's): a value with CR or LF would
// break the header block and a leading space or tab is trimmed on
// reading, so v travels as is only when it is printable ASCII (0x20-0x7E),
// does not begin with a space and does not itself begin with
// base64Prefix; anything else, binary keys included, travels as
// base64Prefix + base64(v). Nothing is lost either way.
func encodeValue(v []byte) string {
	if headerSafe(v) {
		return string(v)
	}
	return base64Prefix + base64.StdEncoding.EncodeToString(v)
}

func headerSafe(v []byte) bool {
	if len(v) > 0 && v[0] == ' ' {
		return false
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return !strings.HasPrefix(string(v), base64Prefix)
}

// decodeValue undoes encodeValue. A value that carries base64Prefix but is
// not valid base64 (a header from another publisher) is kept as it came.
func decodeValue(s string) []byte {
	if rest, ok := strings.CutPrefix(s, base64Prefix); ok {
		if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
			return b
		}
	}
	return []byte(s)
}

// validHeaderKey reports whether k can be a NATS header name: not empty,
// printable ASCII without spaces and colons (the name ends at the colon).
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c > 0x7e || c == ':' {
			return false
		}
	}
	return true
}

// encodeHeaders returns rec's key and headers as NATS headers (nil when
// there are none). A header name NATS cannot carry is bad input:
// INVALID_RECORD, and nothing is published.
func encodeHeaders(rec *stream.Record) (natsclient.Header, error) {
	if rec.Key == nil && len(rec.Headers) == 0 {
		return nil, nil
	}
	h := make(natsclient.Header, len(rec.Headers)+1)
	if rec.Key != nil {
		h[KeyHeader] = []string{encodeValue(rec.Key)}
	}
	for _, hd := range rec.Headers {
		if !validHeaderKey(hd.Key) {
			return nil, fmt.Errorf("nats: header name %q: NATS header names are printable ASCII without spaces or colons: %w", hd.Key, kerr.InvalidRecord)
		}
		if hd.Key == KeyHeader {
			return nil, fmt.Errorf("nats: header name %q is the transport's key header (set Record.Key): %w", hd.Key, kerr.InvalidRecord)
		}
		h[hd.Key] = append(h[hd.Key], encodeValue(hd.Value))
	}
	return h, nil
}

// decodeHeaders sets rec's key and headers from NATS headers. NATS keeps
// the order of the values of one name but not the order across names (a
// map); names come sorted, so a record always decodes the same way.
func decodeHeaders(h natsclient.Header, rec *stream.Record) {
	if len(h) == 0 {
		return
	}
	n := 0
	names := make([]string, 0, len(h))
	for name, values := range h {
		if name == KeyHeader {
			if len(values) > 0 {
				rec.Key = decodeValue(values[len(values)-1])
			}
			continue
		}
		names = append(names, name)
		n += len(values)
	}
	if n == 0 {
		return
	}
	sort.Strings(names)
	rec.Headers = make([]stream.Header, 0, n)
	for _, name := range names {
		for _, v := range h[name] {
			rec.Headers = append(rec.Headers, stream.Header{Key: name, Value: decodeValue(v)})
		}
	}
}

// validSubject checks that topic is a literal NATS subject a stream can
// capture and a message can be published to: dot-separated non-empty
// tokens, no whitespace, no wildcard tokens (* and >).
func validSubject(topic string) error {
	bad := func(why string) error {
		return fmt.Errorf("nats: topic %q is not a NATS subject (%s): %w", topic, why, kerr.InvalidTopicException)
	}
	if topic == "" {
		return bad("empty")
	}
	for _, token := range strings.Split(topic, ".") {
		switch {
		case token == "":
			return bad("an empty token")
		case token == "*" || token == ">":
			return bad("a wildcard")
		case strings.ContainsAny(token, " \t\r\n\x00"):
			return bad("whitespace")
		}
	}
	return nil
}

// escapeName makes s usable as a JetStream stream or consumer name (which
// may not contain '.', '*', '>', whitespace or path separators): ASCII
// letters, digits and '-' stay, every other byte becomes _XX (hex). It is
// reversible, and "__" never occurs in its output, so two escaped names
// joined by "__" cannot collide.
func escapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02X", c)
	}
	return b.String()
}

// StreamName is the name of the stream the transport creates for topic
// when none captures it: the topic escaped (orders.eu becomes
// orders_2Eeu).
func StreamName(topic string) string { return escapeName(topic) }

// DurableName is the name of the durable consumer of group on topic: a
// JetStream consumer reads one stream, and one stream may capture several
// topics, so each (group, topic) has its own, shared by the group's
// members.
func DurableName(group, topic string) string { return escapeName(group) + "__" + escapeName(topic) }
