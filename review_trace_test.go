package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
)

// TestTraceLogsRandomFlag: a job enqueued in a trace whose flags carry
// the W3C random bit (traceparent flags 03, as a caller on a level 2
// tracer sends) is logged with its trace_id and span_id like any other:
// the SDK's child spans keep the flag, so the job's stored trace context
// ends in -03.
func TestTraceLogsRandomFlag(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log, TracerProvider: tp})
	redrive.SetClock(c, clk.now)
	policy := retry.Policy{MaxRetries: 0, Jitter: retry.JitterNone}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &policy, DisableRetryBudget: true, Logger: log, Now: clk.now, TracerProvider: tp})
	exec.HandleFunc("k", func(context.Context, *redrive.Job) error { return errors.New("boom") })
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled | trace.FlagsRandom, Remote: true})
	j, err := c.Enqueue(trace.ContextWithRemoteSpanContext(t.Context(), parent), "k", nil, redrive.InQueue("rq"))
	if err != nil {
		t.Fatal(err)
	}
	if redrive.TraceID(j) != parent.TraceID().String() {
		t.Fatalf("job's trace %q (%q), want the caller's", redrive.TraceID(j), j.Trace)
	}
	runOne(t, st, exec, clk, "rq") // dead
	found := false
	for _, rec := range buf.lines() {
		if id, ok := rec["job_id"].(float64); !ok || int64(id) != j.ID || rec["msg"] != "job moved to the DLQ" {
			continue
		}
		found = true
		if rec["trace_id"] != parent.TraceID().String() || rec["span_id"] == nil {
			line, _ := json.Marshal(rec)
			t.Errorf("line about a job of trace context %q without its trace: %s", j.Trace, line)
		}
	}
	if !found {
		t.Fatalf("no line about the job's move to the DLQ: %v", buf.lines())
	}
}
