package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestRescueLogsTrace: the line saying a job's expired lease was rescued
// is a line about a job, so it carries the trace_id and span_id of the
// job's trace context (issue 30: every log line about a job does).
func TestRescueLogsTrace(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{RescueInterval: time.Hour})
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	c.tracer = newTracer(tp)
	var buf bytes.Buffer
	w.log = slog.New(slog.NewJSONHandler(&buf, nil))
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled, Remote: true})
	j, err := c.Enqueue(trace.ContextWithRemoteSpanContext(t.Context(), parent), "k", nil, InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	lease(t, st, clk, "q", "gone", time.Second)
	clk.add(time.Minute)
	w.rescuer.rescue(t.Context())

	found := false
	for line := range bytes.Lines(buf.Bytes()) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "expired lease rescued" {
			continue
		}
		found = true
		if rec["trace_id"] != parent.TraceID().String() || rec["span_id"] == nil {
			t.Errorf("rescue of job %d (trace context %q) logged without its trace: %s", j.ID, j.Trace, line)
		}
	}
	if !found {
		t.Fatalf("no rescue line; log:\n%s", buf.String())
	}
}
