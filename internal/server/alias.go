package server

import (
	"reflect"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A decoded request body can refer to its frame in two ways: kmsg decodes
// strings by copying but []byte fields by slicing the frame (Produce
// records, group member metadata), and it keeps unknown tagged fields
// (kmsg.Tags) as slices of the frame too. A body whose type has no []byte
// field lets go of its frame once its unknown tags are dropped (no handler
// reads them: they are unknown), so the server can recycle the frame and
// release its share of the memory budget right after decoding. That is what
// keeps a long-poll fetch, or any request that waits, from holding its
// request bytes while it waits.

// bodyShape is what the server knows about one request type.
type bodyShape struct {
	// aliasesFrame: some []byte field may refer to the frame, so the frame
	// is kept until Handle returns.
	aliasesFrame bool
	// dropTags zeroes every kmsg.Tags in a body of this type (addressable
	// reflect.Value of the struct); nil when the type has none.
	dropTags func(reflect.Value)
}

var tagsType = reflect.TypeFor[kmsg.Tags]()

// bodyShapes is indexed by API key; built on first use.
var bodyShapes = sync.OnceValue(func() *[kmsg.MaxKey + 1]bodyShape {
	var shapes [kmsg.MaxKey + 1]bodyShape
	for key := range shapes {
		r := kmsg.RequestForKey(int16(key))
		if r == nil {
			shapes[key].aliasesFrame = true // unknown: assume the worst
			continue
		}
		aliases, drop := shapeOf(reflect.TypeOf(r).Elem(), map[reflect.Type]bool{})
		shapes[key] = bodyShape{aliasesFrame: aliases, dropTags: drop}
	}
	return &shapes
})

// releaseBodyFromFrame drops the unknown tags of req's body and reports
// whether the body then no longer refers to its frame.
func releaseBodyFromFrame(req *Request) bool {
	if req.Key < 0 || int(req.Key) > kmsg.MaxKey {
		return false
	}
	shape := &bodyShapes()[req.Key]
	if shape.aliasesFrame {
		return false
	}
	if shape.dropTags != nil && req.Body.IsFlexible() {
		shape.dropTags(reflect.ValueOf(req.Body).Elem())
	}
	return true
}

// shapeOf reports whether values of t may hold a []byte, and returns a
// function dropping the kmsg.Tags inside a value of t (nil if none). seen
// guards against recursive types, which are treated as aliasing.
func shapeOf(t reflect.Type, seen map[reflect.Type]bool) (aliases bool, drop func(reflect.Value)) {
	if t == tagsType {
		return false, func(v reflect.Value) { v.Set(reflect.Zero(tagsType)) }
	}
	switch t.Kind() {
	case reflect.Struct:
		if seen[t] {
			return true, nil
		}
		seen[t] = true
		defer delete(seen, t)
		var drops []func(reflect.Value)
		for i := range t.NumField() {
			f := t.Field(i)
			a, d := shapeOf(f.Type, seen)
			aliases = aliases || a
			if d == nil {
				continue
			}
			if !f.IsExported() {
				aliases = true // cannot be dropped through reflection
				continue
			}
			drops = append(drops, func(v reflect.Value) { d(v.Field(i)) })
		}
		if len(drops) > 0 {
			drop = func(v reflect.Value) {
				for _, d := range drops {
					d(v)
				}
			}
		}
		return aliases, drop
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return true, nil // a []byte may be a slice of the frame
		}
		a, d := shapeOf(t.Elem(), seen)
		if d != nil {
			drop = func(v reflect.Value) {
				for i := range v.Len() {
					d(v.Index(i))
				}
			}
		}
		return a, drop
	case reflect.Pointer:
		a, d := shapeOf(t.Elem(), seen)
		if d != nil {
			drop = func(v reflect.Value) {
				if !v.IsNil() {
					d(v.Elem())
				}
			}
		}
		return a, drop
	case reflect.Map:
		ka, _ := shapeOf(t.Key(), seen)
		va, vd := shapeOf(t.Elem(), seen)
		return ka || va || vd != nil, nil
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return true, nil
	}
	return false, nil // numbers, bools, strings (copied by kmsg)
}
