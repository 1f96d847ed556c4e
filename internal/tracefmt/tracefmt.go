// Package tracefmt renders kmsg values compactly for the golden traces of
// the coordinators' state machines (internal/group, internal/txn): one
// line per response, stable, diffable.
package tracefmt

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Value renders a kmsg struct: every field but the version, throttle, tags
// and timestamps of state changes; zero error codes and nil pointers and
// slices left out (but the fields named in keepNil); error codes by name;
// prose error messages left out (the code says it). Byte slices go through
// formatBytes (field name, bytes).
func Value(v reflect.Value, formatBytes func(field string, b []byte) string, keepNil ...string) string {
	switch v.Kind() {
	case reflect.Struct:
		var parts []string
		for i := 0; i < v.NumField(); i++ {
			f, name := v.Field(i), v.Type().Field(i).Name
			switch name {
			case "Version", "ThrottleMillis", "UnknownTags", "CurrentStateTimestamp", "ErrorMessage":
				continue
			}
			if name == "ErrorCode" {
				if f.Int() != 0 {
					parts = append(parts, name+"="+ErrName(int16(f.Int())))
				}
				continue
			}
			if (f.Kind() == reflect.Pointer || f.Kind() == reflect.Slice) && f.IsNil() && !contains(keepNil, name) {
				continue
			}
			if f.Kind() == reflect.Array && f.IsZero() {
				continue
			}
			if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Uint8 {
				parts = append(parts, name+"="+formatBytes(name, f.Bytes()))
				continue
			}
			parts = append(parts, name+"="+Value(f, formatBytes, keepNil...))
		}
		return "{" + strings.Join(parts, " ") + "}"
	case reflect.Pointer:
		if v.IsNil() {
			return "nil"
		}
		return Value(v.Elem(), formatBytes, keepNil...)
	case reflect.Slice:
		var parts []string
		for i := 0; i < v.Len(); i++ {
			parts = append(parts, Value(v.Index(i), formatBytes, keepNil...))
		}
		return "[" + strings.Join(parts, " ") + "]"
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Array:
		b := make([]byte, v.Len())
		for i := range b {
			b[i] = byte(v.Index(i).Uint())
		}
		return string(bytes.TrimRight(b, "\x00"))
	default:
		return fmt.Sprint(v.Interface())
	}
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// ErrName is a Kafka error code's name (its number if unknown).
func ErrName(code int16) string {
	if e := kerr.TypedErrorForCode(code); e != nil {
		return e.Message
	}
	return strconv.Itoa(int(code))
}
