package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// longTraceState returns a valid tracestate of 32 members (the most the
// W3C allows) of 64-character values: about 2.4 kB, beyond the 512
// characters a tracer must propagate and a job's store.MaxTrace.
func longTraceState(t *testing.T) trace.TraceState {
	t.Helper()
	var ts trace.TraceState
	for i := range 32 {
		var err error
		if ts, err = ts.Insert(fmt.Sprintf("vendor%02d", i), strings.Repeat(string(rune('a'+i%26)), 64)); err != nil {
			t.Fatal(err)
		}
	}
	return ts
}

// TestTraceLongTraceState: a job enqueued under a caller whose tracestate
// is valid but long is stored, in the caller's trace, with a tracestate
// cut as the W3C says (at most 512 characters), never refused.
func TestTraceLongTraceState(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{TracerProvider: tp})
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled, TraceState: longTraceState(t), Remote: true})
	j, err := c.Enqueue(trace.ContextWithRemoteSpanContext(t.Context(), parent), "k", nil, redrive.InQueue("lts"))
	if err != nil {
		t.Fatalf("Enqueue under a long tracestate: %v", err)
	}
	if redrive.TraceID(j) != parent.TraceID().String() {
		t.Errorf("job's trace %q, want the caller's", j.Trace)
	}
	if _, state, _ := strings.Cut(j.Trace, " "); len(state) > 512 || state == "" {
		t.Errorf("job's tracestate is %d characters, want 1 to 512: %q", len(state), state)
	}
}
