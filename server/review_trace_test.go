package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

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
