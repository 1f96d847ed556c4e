package stream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// AsyncAPIInfo is the document's info object and, optionally, its server.
type AsyncAPIInfo struct {
	Title       string
	Version     string
	Description string
	// Server, when set, is the broker's host:port, described as a kafka
	// server named "broker".
	Server string
}

type publisherInfo struct {
	topic     string
	valueType reflect.Type
	codec     any
}

// AsyncAPI returns the AsyncAPI 3.0 document (JSON) of the App's
// handlers and publishers: a channel per topic, a receive operation per
// handler, a send operation per PublishTo, per Publisher and per
// DeadLetter on the App's Producer (its message: the original bytes, with
// the headers DeadLetter adds), and a
// message per payload type with a JSON Schema derived from the Go type
// (json tags, omitempty for what is optional; protobuf messages are
// described as objects named by their full name). Call it after the
// handlers are registered; the output is deterministic.
func (a *App) AsyncAPI(info AsyncAPIInfo) ([]byte, error) {
	d := asyncDoc{
		channels:   map[string]any{},
		operations: map[string]any{},
		messages:   map[string]any{},
	}
	topics := make([]string, 0, len(a.handlers))
	for t := range a.handlers {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		h := a.handlers[t]
		ref := d.message(h.topic, h.inType, h.inCodecDescriptor)
		op := map[string]any{
			"action":   "receive",
			"channel":  map[string]any{"$ref": "#/channels/" + componentKey(h.topic)},
			"messages": []any{map[string]any{"$ref": ref}},
			"summary":  fmt.Sprintf("Handled by group %q, ack policy %v", a.cfg.group, h.ack),
		}
		d.operations["receive_"+componentKey(h.topic)] = op
		if h.outType != nil {
			d.send(h.publishTo, h.outType, h.outCodecDescriptor, "The result of the "+h.topic+" handler")
		}
	}
	for _, p := range a.publishers {
		d.send(p.topic, p.valueType, p.codec, "Published by a Publisher")
	}
	for _, topic := range a.deadLetters {
		d.deadLetter(topic)
	}
	doc := map[string]any{
		"asyncapi":   "3.0.0",
		"info":       map[string]any{"title": info.Title, "version": info.Version},
		"channels":   d.channels,
		"operations": d.operations,
		"components": map[string]any{"messages": d.messages},
	}
	if info.Description != "" {
		doc["info"].(map[string]any)["description"] = info.Description
	}
	if info.Server != "" {
		doc["servers"] = map[string]any{"broker": map[string]any{"host": info.Server, "protocol": "kafka"}}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// AsyncAPIHandler serves the App's AsyncAPI document.
func (a *App) AsyncAPIHandler(info AsyncAPIInfo) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, err := a.AsyncAPI(info)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
}

type asyncDoc struct {
	channels, operations, messages map[string]any
}

// message adds topic's channel (if new) with a message of type t and
// returns the reference to the channel's message.
func (d *asyncDoc) message(topic string, t reflect.Type, codec any) string {
	chKey, ch := d.channel(topic)
	msgKey := componentKey(typeName(t))
	contentType := ""
	if c, ok := codec.(ContentTyper); ok {
		contentType = c.ContentType()
	}
	if contentType != "" {
		msgKey += "_" + componentKey(contentType)
	}
	if _, ok := d.messages[msgKey]; !ok {
		m := map[string]any{"name": typeName(t), "payload": schemaOf(t, map[reflect.Type]bool{})}
		if contentType != "" {
			m["contentType"] = contentType
		}
		d.messages[msgKey] = m
	}
	ch["messages"].(map[string]any)[msgKey] = map[string]any{"$ref": "#/components/messages/" + msgKey}
	return "#/channels/" + chKey + "/messages/" + msgKey
}

// channel returns topic's channel and its key, adding it if new.
func (d *asyncDoc) channel(topic string) (string, map[string]any) {
	chKey := componentKey(topic)
	ch, ok := d.channels[chKey].(map[string]any)
	if !ok {
		ch = map[string]any{"address": topic, "messages": map[string]any{}}
		d.channels[chKey] = ch
	}
	return chKey, ch
}

func (d *asyncDoc) send(topic string, t reflect.Type, codec any, summary string) {
	d.sendOperation(topic, d.message(topic, t, codec), summary)
}

// sendOperation adds the message ref to topic's send operation, adding
// the operation if new.
func (d *asyncDoc) sendOperation(topic, ref, summary string) {
	key := "send_" + componentKey(topic)
	if op, ok := d.operations[key].(map[string]any); ok {
		msgs := op["messages"].([]any)
		for _, m := range msgs {
			if m.(map[string]any)["$ref"] == ref {
				return
			}
		}
		op["messages"] = append(msgs, map[string]any{"$ref": ref})
		return
	}
	d.operations[key] = map[string]any{
		"action":   "send",
		"channel":  map[string]any{"$ref": "#/channels/" + componentKey(topic)},
		"messages": []any{map[string]any{"$ref": ref}},
		"summary":  summary,
	}
}

// deadLetterMessageKey names the one message of every dead-letter channel.
const deadLetterMessageKey = "DeadLetter"

// deadLetter adds topic as a dead-letter channel with its send operation.
// The payload is whatever failed, as received (even bytes that did not
// decode), so its schema says nothing of its shape; the headers are
// DeadLetter's, as Kafka headers carry them: strings, the numbers in
// decimal, after the original record's own headers.
func (d *asyncDoc) deadLetter(topic string) {
	if _, ok := d.messages[deadLetterMessageKey]; !ok {
		decimal := func(description string) map[string]any {
			return map[string]any{"type": "string", "pattern": "^-?[0-9]+$", "description": description}
		}
		d.messages[deadLetterMessageKey] = map[string]any{
			"name":        deadLetterMessageKey,
			"summary":     "A delivery that failed: the original key, value and headers, and why, in headers",
			"contentType": "application/octet-stream",
			"payload":     map[string]any{"description": "the original record's value, the bytes as received"},
			"headers": map[string]any{
				"type": "object",
				"properties": map[string]any{
					HeaderDeadLetterError:     map[string]any{"type": "string", "description": "the handler's error"},
					HeaderDeadLetterAttempts:  decimal("deliveries tried, retries included"),
					HeaderDeadLetterTopic:     map[string]any{"type": "string", "description": "the topic the record came from"},
					HeaderDeadLetterPartition: decimal("its partition"),
					HeaderDeadLetterOffset:    decimal("its offset"),
				},
				"required": []string{HeaderDeadLetterAttempts, HeaderDeadLetterError, HeaderDeadLetterOffset, HeaderDeadLetterPartition, HeaderDeadLetterTopic},
				// The original record's headers come first, whatever they are.
				"additionalProperties": true,
			},
		}
	}
	chKey, ch := d.channel(topic)
	ch["messages"].(map[string]any)[deadLetterMessageKey] = map[string]any{"$ref": "#/components/messages/" + deadLetterMessageKey}
	d.sendOperation(topic, "#/channels/"+chKey+"/messages/"+deadLetterMessageKey, "Dead letters: deliveries that failed, as received")
}

var notComponentKey = regexp.MustCompile(`[^A-Za-z0-9_\-]`)

// componentKey makes s a valid AsyncAPI component key (^[A-Za-z0-9_\-]+$).
func componentKey(s string) string { return notComponentKey.ReplaceAllString(s, "_") }

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() != "" {
		return t.Name()
	}
	return t.String()
}

var (
	protoMessageType = reflect.TypeFor[proto.Message]()
	timeType         = reflect.TypeFor[time.Time]()
)

// schemaOf is the JSON Schema (draft 07, which AsyncAPI's schema format
// extends) of how encoding/json encodes t. seen breaks recursion.
func schemaOf(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	if t.Implements(protoMessageType) {
		name := t.String()
		if m, ok := reflect.Zero(t).Interface().(proto.Message); ok {
			name = string(m.ProtoReflect().Descriptor().FullName())
		}
		return map[string]any{"type": "object", "description": "protobuf message " + name}
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), seen)
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), seen)}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{"type": "object", "description": t.Name() + " (recursive)"}
		}
		seen[t] = true
		defer delete(seen, t)
		properties := map[string]any{}
		var required []string
		addFields(t, seen, properties, &required)
		s := map[string]any{"type": "object", "properties": properties}
		if len(required) > 0 {
			slices.Sort(required)
			s["required"] = required
		}
		return s
	}
	return map[string]any{}
}

// addFields adds t's JSON fields, flattening embedded structs as
// encoding/json does.
func addFields(t reflect.Type, seen map[reflect.Type]bool, properties map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, options, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, seen, properties, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		properties[name] = schemaOf(f.Type, seen)
		if !strings.Contains(options, "omitempty") && !strings.Contains(options, "omitzero") {
			*required = append(*required, name)
		}
	}
}
