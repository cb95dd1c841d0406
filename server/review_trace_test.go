package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redrivehq/redrive"
)

// TestEnqueueLongTracestate: an enqueue request with a valid traceparent
// and a valid but long tracestate (32 members, about 2.4 kB) is enqueued
// in the caller's trace, its tracestate cut to the 512 characters the
// W3C asks a tracer to propagate; never refused.
func TestEnqueueLongTracestate(t *testing.T) {
	e, _ := newTracedEnv(t)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	members := make([]string, 32)
	for i := range members {
		members[i] = fmt.Sprintf("vendor%02d=%s", i, strings.Repeat("v", 64))
	}
	r := e.do("POST", "/v1/jobs", `{"kind":"index","queue":"tq","payload":{"doc":1}}`,
		"traceparent", "00-"+traceID+"-b7ad6b7169203331-01", "tracestate", strings.Join(members, ","))
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/jobs with a long tracestate: %d %s, want it enqueued", r.status, r.body)
	}
	var j redrive.Job
	r.json(t, &j)
	if got := redrive.TraceID(&j); got != traceID {
		t.Errorf("job in trace %q, want the request's", got)
	}
	if _, state, _ := strings.Cut(j.Trace, " "); len(state) > 512 || !strings.HasPrefix(state, "vendor00=") {
		t.Errorf("job's tracestate is %d characters, want its first members within 512: %q", len(state), state)
	}
}

// TestEnqueueHostileTraceparent: an enqueue request whose traceparent is
// malformed in any way (empty, upper case, version ff, huge, with a
// control-free but hostile tracestate) is enqueued in a new trace and
// counted once as malformed (redrive_trace_contexts_malformed_total),
// never refused.
func TestEnqueueHostileTraceparent(t *testing.T) {
	e, _ := newTracedEnv(t)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	for _, bad := range [][]string{
		{"traceparent", ""},
		{"traceparent", " "},
		{"traceparent", "00-" + strings.ToUpper(traceID) + "-b7ad6b7169203331-01"},
		{"traceparent", "ff-" + traceID + "-b7ad6b7169203331-01"},
		{"traceparent", "00-" + traceID + "-0000000000000000-01"},
		{"traceparent", "00-" + traceID + "-b7ad6b7169203331-01-" + strings.Repeat("x", 4000)},
		{"traceparent", strings.Repeat("0", 4000), "tracestate", strings.Repeat("a=b,", 1000)},
	} {
		before := redrive.MalformedTraceContexts()
		r := e.do("POST", "/v1/jobs", `{"kind":"index","queue":"tq","payload":{"doc":1}}`, bad...)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /v1/jobs with traceparent %.40q: %d %s, want it enqueued", bad[1], r.status, r.body)
		}
		var j redrive.Job
		r.json(t, &j)
		if got := redrive.TraceID(&j); got == traceID {
			t.Errorf("traceparent %.40q: job in the malformed context's trace, want a new one", bad[1])
		}
		if got := redrive.MalformedTraceContexts(); got != before+1 {
			t.Errorf("traceparent %.40q: %d malformed trace contexts counted, want %d", bad[1], got-before, 1)
		}
	}
}

// TestRedriveReplayTraceparent: a redrive (POST /v1/dlq/redrive) or a
// replay (POST /v1/replay) request's traceparent makes the operation's
// span its child, in its trace, as docs/tracing.md says ("the caller's
// span") and as an enqueue request's does.
func TestRedriveReplayTraceparent(t *testing.T) {
	e, rec := newTracedEnv(t)
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	ids := buryExamples(t, e, "rq", 2)
	for _, c := range []struct{ name, path, body string }{
		{"redrive", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[0])},
		{"replay", "/v1/replay", fmt.Sprintf(`{"filter":{"queue":"rq","states":["dead"]},"note":"n%d"}`, ids[1])},
	} {
		r := e.do("POST", c.path, c.body, "traceparent", "00-"+traceID+"-"+spanID+"-01")
		if r.status/100 != 2 {
			t.Fatalf("POST %s: %d %s", c.path, r.status, r.body)
		}
		var span sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == c.name {
				span = s
			}
		}
		if span == nil {
			t.Fatalf("POST %s: no %q span", c.path, c.name)
		}
		if p := span.Parent(); p.TraceID().String() != traceID || p.SpanID().String() != spanID {
			t.Errorf("POST %s: the %s span's parent is %s/%s, want the request's traceparent", c.path, c.name, p.TraceID(), p.SpanID())
		}
	}
}
