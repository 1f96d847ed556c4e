// Package errresptest is what tests need to check error answers on the
// wire: a request naming one of everything (FillOne), the error codes a
// response carries once encoded at its version and decoded (WireCodes), and
// a coordinator's answers to the request types it does not serve
// (NotServedIsAnError).
package errresptest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FillOne gives every list of req one element and every string a value,
// so that an answer has one of every item the request can name.
func FillOne(req kmsg.Request) { fillOne(reflect.ValueOf(req).Elem()) }

func fillOne(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillOne(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillOne(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.String {
			s := "x"
			v.Set(reflect.ValueOf(&s))
		}
	}
}

// WireCodes encodes resp at its version, decodes it and returns every
// ErrorCode field of what was decoded (codes), and those of list elements
// (items) on their own: what a client reads.
func WireCodes(resp kmsg.Response) (codes, items []int16, err error) {
	decoded := resp.RequestKind().ResponseKind()
	decoded.SetVersion(resp.GetVersion())
	if err := decoded.ReadFrom(resp.AppendTo(nil)); err != nil {
		return nil, nil, fmt.Errorf("%T v%d does not decode: %w", resp, resp.GetVersion(), err)
	}
	collect(reflect.ValueOf(decoded).Elem(), false, &codes, &items)
	return codes, items, nil
}

func collect(v reflect.Value, inItem bool, codes, items *[]int16) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16 {
				c := int16(v.Field(i).Int())
				*codes = append(*codes, c)
				if inItem {
					*items = append(*items, c)
				}
				continue
			}
			collect(v.Field(i), inItem, codes, items)
		}
	case reflect.Slice:
		for i := range v.Len() {
			collect(v.Index(i), true, codes, items)
		}
	}
}

// NotServedIsAnError hands do (a coordinator's Do) a request of every type
// kmsg knows but served, as a wrong route would: each must come back as
// UNKNOWN_SERVER_ERROR on the wire, in the request's own shape, or as
// unsupported (the caller closes the connection), never as a bare response
// whose error code 0 reads as success.
func NotServedIsAnError(t testing.TB, served []int16, unsupported error, do func(kmsg.Request) (kmsg.Response, error)) {
	t.Helper()
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil || slices.Contains(served, key) {
			continue
		}
		FillOne(req)
		req.SetVersion(req.MaxVersion())
		resp, err := do(req)
		if errors.Is(err, unsupported) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(key), err)
		}
		codes, _, err := WireCodes(resp)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(key), err)
		}
		if !slices.Contains(codes, kerr.UnknownServerError.Code) {
			t.Errorf("%s routed wrong: answered %T with error codes %v, want UNKNOWN_SERVER_ERROR or %v", kmsg.NameForKey(key), resp, codes, unsupported)
		}
	}
}
