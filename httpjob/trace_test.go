package httpjob_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/httpjob"
)

// attemptSpan is the span context of a traced attempt, with a tracestate.
func attemptSpan(t *testing.T) (context.Context, string) {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=v1")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc), "00-01020300000000000000000000000000-0405060000000000-01"
}

// TestTraceParent: a request carries the attempt's trace context (its
// traceparent and tracestate), unless the options turn it off, the
// payload sends its own, or the attempt is not traced.
func TestTraceParent(t *testing.T) {
	type seen struct{ parent, state string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("traceparent"), r.Header.Get("tracestate")}
	}))
	t.Cleanup(srv.Close)
	traced, parent := attemptSpan(t)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, c := range []struct {
		name    string
		opts    httpjob.Options
		ctx     context.Context
		headers map[string]string
		want    seen
	}{
		{"traced", httpjob.Options{}, traced, nil, seen{parent, "vendor=v1"}},
		{"off", httpjob.Options{NoTraceParent: true}, traced, nil, seen{}},
		{"payload's own", httpjob.Options{}, traced, map[string]string{"Traceparent": own}, seen{own, ""}},
		{"not traced", httpjob.Options{}, context.Background(), nil, seen{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"url": srv.URL, "headers": c.headers})
			if err := httpjob.New(c.opts).Handle(c.ctx, &redrive.Job{ID: 1, Kind: httpjob.Kind, Payload: raw}); err != nil {
				t.Fatal(err)
			}
			if s := <-got; s != c.want {
				t.Errorf("server saw traceparent %q, tracestate %q; want %q, %q", s.parent, s.state, c.want.parent, c.want.state)
			}
		})
	}
}
