package stream_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

type Line struct {
	SKU      string  `json:"sku"`
	Quantity int     `json:"quantity"`
	Note     *string `json:"note,omitempty"`
}

type FullOrder struct {
	ID      string            `json:"id"`
	Lines   []Line            `json:"lines"`
	Placed  time.Time         `json:"placed"`
	Labels  map[string]string `json:"labels,omitempty"`
	Ignored string            `json:"-"`
}

func documentedApp() *stream.App {
	app := stream.New(memory.New(), stream.Group("billing"))
	stream.Handle(app, "orders", func(ctx context.Context, o FullOrder) (Receipt, error) { return Receipt{}, nil },
		stream.PublishTo("receipts"), stream.WithMiddleware(stream.DeadLetter(app.Producer(), "orders.dlq")))
	stream.HandleBatch(app, "clicks", func(ctx context.Context, c [][]byte) error { return nil })
	stream.Consume(app, "names", func(ctx context.Context, v *wrapperspb.StringValue) error { return nil })
	stream.NewPublisher[string](app, "audit.log", nil)
	return app
}

func TestAsyncAPIDocument(t *testing.T) {
	doc, err := documentedApp().AsyncAPI(stream.AsyncAPIInfo{Title: "billing", Version: "1.0.0", Server: "127.0.0.1:9092"})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		AsyncAPI   string                     `json:"asyncapi"`
		Channels   map[string]json.RawMessage `json:"channels"`
		Operations map[string]struct {
			Action  string `json:"action"`
			Channel struct {
				Ref string `json:"$ref"`
			} `json:"channel"`
		} `json:"operations"`
		Components struct {
			Messages map[string]struct {
				ContentType string         `json:"contentType"`
				Payload     map[string]any `json:"payload"`
				Headers     map[string]any `json:"headers"`
			} `json:"messages"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.AsyncAPI != "3.0.0" || len(d.Channels) != 6 {
		t.Fatalf("version %q, %d channels (want orders, receipts, clicks, names, audit.log, orders.dlq):\n%s", d.AsyncAPI, len(d.Channels), doc)
	}
	for key, want := range map[string]string{
		"receive_orders": "receive", "send_receipts": "send", "receive_clicks": "receive",
		"receive_names": "receive", "send_audit_log": "send", "send_orders_dlq": "send",
	} {
		if op := d.Operations[key]; op.Action != want || !strings.HasPrefix(op.Channel.Ref, "#/channels/") {
			t.Fatalf("operation %s: %+v\n%s", key, op, doc)
		}
	}
	order := d.Components.Messages["FullOrder_application_json"]
	props, _ := order.Payload["properties"].(map[string]any)
	if order.ContentType != "application/json" || props == nil || props["Ignored"] != nil || props["lines"] == nil {
		t.Fatalf("FullOrder message: %+v", order)
	}
	if placed := props["placed"].(map[string]any); placed["format"] != "date-time" {
		t.Fatalf("time.Time as %v", placed)
	}
	if req := order.Payload["required"].([]any); len(req) != 3 {
		t.Fatalf("required %v: want id, lines, placed (labels is omitempty)", req)
	}
	line := props["lines"].(map[string]any)["items"].(map[string]any)
	if req := line["required"].([]any); len(req) != 2 {
		t.Fatalf("Line required %v: want sku, quantity", req)
	}
	if m := d.Components.Messages["StringValue_application_x-protobuf"]; !strings.Contains(m.Payload["description"].(string), "google.protobuf.StringValue") {
		t.Fatalf("protobuf message: %+v", m)
	}
	if m := d.Components.Messages["__uint8_application_octet-stream"]; m.ContentType != "application/octet-stream" {
		t.Fatalf("messages %v", d.Components.Messages)
	}
	// The dead-letter topic: its message carries DeadLetter's headers.
	var dlq struct {
		Address  string                     `json:"address"`
		Messages map[string]json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(d.Channels["orders_dlq"], &dlq); err != nil || dlq.Address != "orders.dlq" || dlq.Messages["DeadLetter"] == nil {
		t.Fatalf("dead-letter channel %s (%v)", d.Channels["orders_dlq"], err)
	}
	letter := d.Components.Messages["DeadLetter"]
	if letter.ContentType != "application/octet-stream" {
		t.Fatalf("dead letter message %+v", letter)
	}
	headers := letter.Headers["properties"].(map[string]any)
	for _, h := range []string{stream.HeaderDeadLetterError, stream.HeaderDeadLetterAttempts, stream.HeaderDeadLetterTopic,
		stream.HeaderDeadLetterPartition, stream.HeaderDeadLetterOffset} {
		if headers[h] == nil {
			t.Fatalf("dead letter headers %v: no %s", headers, h)
		}
	}
	// Served too.
	rec := httptest.NewRecorder()
	documentedApp().AsyncAPIHandler(stream.AsyncAPIInfo{Title: "billing", Version: "1.0.0"}).ServeHTTP(rec, httptest.NewRequest("GET", "/asyncapi.json", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"asyncapi": "3.0.0"`) {
		t.Fatalf("served %d: %.200s", rec.Code, rec.Body.String())
	}
}

// TestAsyncAPIValidatesWithTheAsyncAPIParser runs @asyncapi/parser (npm) on
// the document. It needs node and `npm ci` in testdata/asyncapi.
func TestAsyncAPIValidatesWithTheAsyncAPIParser(t *testing.T) {
	dir, _ := filepath.Abs("testdata/asyncapi")
	// Without the parser the test skips, except on CI (CI is set by
	// .ci/run's caller), where .ci/run has installed it.
	skip := t.Skip
	if os.Getenv("CI") != "" {
		skip = t.Fatal
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@asyncapi", "parser")); err != nil {
		skip("the AsyncAPI parser is not installed: run `npm ci` in stream/testdata/asyncapi (.ci/run does)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed")
	}
	doc, err := documentedApp().AsyncAPI(stream.AsyncAPIInfo{Title: "billing", Version: "1.0.0", Description: "orders to receipts", Server: "127.0.0.1:9092"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "asyncapi.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "validate.mjs", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "VALID: AsyncAPI 3.0.0, 6 channels, 6 operations") {
		t.Fatalf("the AsyncAPI parser: %v\n%s\ndocument:\n%s", err, out, doc)
	}
	t.Logf("%s", out)
}
