package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
)

// newTracedEnv serves the API with a client that traces into the
// returned recorder.
func newTracedEnv(t *testing.T) (*env, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet, TracerProvider: tp})
	api := New(Options{Client: c, Logger: quiet})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })
	return &env{t: t, srv: srv, api: api, client: c, st: st}, rec
}

// TestEnqueueTraceparent: an enqueue request's traceparent and tracestate
// headers make the enqueue's span their child, in their trace, and the
// jobs keep that trace; on a batch too. A malformed traceparent (or two)
// is ignored, a new trace started, and counted, never refused.
func TestEnqueueTraceparent(t *testing.T) {
	e, rec := newTracedEnv(t)
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
		parent  = "00-" + traceID + "-" + spanID + "-01"
	)
	lastSend := func() sdktrace.ReadOnlySpan {
		t.Helper()
		ended := rec.Ended()
		if len(ended) == 0 {
			t.Fatal("no span ended")
		}
		return ended[len(ended)-1]
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", `{"kind":"index","queue":"tq","payload":{"doc":1}}`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"index","queue":"tq","payload":{"doc":2}},{"kind":"index","queue":"tq","payload":{"doc":3}}]}`},
	} {
		r := e.do("POST", c.path, c.body, "traceparent", parent, "tracestate", "congo=t61rcWkgMzE")
		if r.status != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", c.path, r.status, r.body)
		}
		span := lastSend()
		if got := span.Parent(); got.TraceID().String() != traceID || got.SpanID().String() != spanID || !got.IsRemote() {
			t.Errorf("POST %s: the enqueue span's parent is %v, want the traceparent's span", c.path, got)
		}
		if got := span.SpanContext().TraceState().Get("congo"); got != "t61rcWkgMzE" {
			t.Errorf("POST %s: the enqueue span's tracestate congo=%q, want the request's", c.path, got)
		}
		var jobs []*redrive.Job
		if c.path == "/v1/jobs" {
			var j redrive.Job
			r.json(t, &j)
			jobs = append(jobs, &j)
		} else {
			var b struct{ Jobs []*redrive.Job }
			r.json(t, &b)
			jobs = b.Jobs
		}
		for _, j := range jobs {
			if got := redrive.TraceID(j); got != traceID {
				t.Errorf("POST %s: job %d in trace %q, want the request's %s", c.path, j.ID, got, traceID)
			}
		}
	}
	for _, bad := range [][]string{
		{"traceparent", "00-" + traceID + "-" + spanID},                          // truncated
		{"traceparent", "00-00000000000000000000000000000000-" + spanID + "-01"}, // zero trace id
		{"traceparent", "not a trace context", "tracestate", "congo=t61rcWkgMzE"},
	} {
		before := redrive.MalformedTraceContexts()
		r := e.do("POST", "/v1/jobs", `{"kind":"index","queue":"tq","payload":{"doc":4}}`, bad...)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /v1/jobs with %q: %d %s, want it enqueued", bad, r.status, r.body)
		}
		span := lastSend()
		if span.Parent().IsValid() || span.SpanContext().TraceID().String() == traceID {
			t.Errorf("with %q: the enqueue span's parent is %v in trace %s, want a new trace", bad, span.Parent(), span.SpanContext().TraceID())
		}
		if got := redrive.MalformedTraceContexts(); got != before+1 {
			t.Errorf("with %q: %d malformed trace contexts counted, want %d", bad, got, before+1)
		}
	}
	// Two traceparent headers: both ignored, counted once.
	before := redrive.MalformedTraceContexts()
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/jobs", strings.NewReader(`{"kind":"index","queue":"tq","payload":{"doc":5}}`))
	req.Header.Add("traceparent", parent)
	req.Header.Add("traceparent", fmt.Sprintf("00-%s-%s-01", "1af7651916cd43dd8448eb211c80319c", spanID))
	req.Header.Set("Content-Type", "application/json")
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("two traceparents: %d, want it enqueued", res.StatusCode)
	}
	if span := lastSend(); span.Parent().IsValid() {
		t.Errorf("two traceparents: the enqueue span's parent is %v, want none", span.Parent())
	}
	if got := redrive.MalformedTraceContexts(); got != before+1 {
		t.Errorf("two traceparents: %d counted, want %d", got, before+1)
	}
}
