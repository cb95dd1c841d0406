package download_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
)

// TestTraceParent: a download's request carries the attempt's trace
// context, unless the options turn it off, the payload sends its own, or
// the attempt is not traced.
func TestTraceParent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.Write([]byte("content"))
	}))
	t.Cleanup(srv.Close)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	parent := "00-01020300000000000000000000000000-0405060000000000-01"
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for i, c := range []struct {
		name    string
		opts    download.Options
		ctx     context.Context
		headers map[string]string
		want    string
	}{
		{"traced", download.Options{}, traced, nil, parent},
		{"off", download.Options{NoTraceParent: true}, traced, nil, ""},
		{"payload's own", download.Options{}, traced, map[string]string{"traceparent": own}, own},
		{"not traced", download.Options{}, context.Background(), nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHandler(t, c.opts)
			raw, _ := json.Marshal(map[string]any{"url": srv.URL, "dest": fmt.Sprintf("f%d", i), "headers": c.headers})
			if err := h.Handle(c.ctx, &redrive.Job{ID: int64(i + 1), Kind: download.Kind, Payload: raw}); err != nil {
				t.Fatal(err)
			}
			if s := <-got; s != c.want {
				t.Errorf("server saw traceparent %q, want %q", s, c.want)
			}
		})
	}
}
