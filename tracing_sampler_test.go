package redrive_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestTraceUnsampledParent: a job enqueued in a trace its sampler did not
// sample keeps that trace's context. Its attempt under a parent-based
// sampler is not sampled either, yet runs in the job's trace (a new span
// id, the trace id a handler propagates, flags not sampled); under a
// sampler that does not follow the parent (the always-on sampler a user
// may configure) the attempt is recorded, a child of the enqueue's span.
func TestTraceUnsampledParent(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	enqRec := tracetest.NewSpanRecorder()
	enqTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())), sdktrace.WithSpanProcessor(enqRec))
	t.Cleanup(func() { enqTP.Shutdown(context.Background()) })
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: enqTP})
	redrive.SetClock(c, clk.now)

	for _, tc := range []struct {
		name     string
		sampler  sdktrace.Sampler
		recorded bool
	}{
		{"parent-based", sdktrace.ParentBased(sdktrace.AlwaysSample()), false},
		{"always-on", sdktrace.AlwaysSample(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := "uq-" + tc.name
			job, err := c.Enqueue(t.Context(), "k", nil, redrive.InQueue(queue))
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(job.Trace, "-")
			if len(parts) != 4 || parts[3] != "00" || redrive.TraceID(job) == "" {
				t.Fatalf("job's trace context %q, want a valid one, not sampled", job.Trace)
			}
			enqSpan := parts[2]

			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { tp.Shutdown(context.Background()) })
			exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quietLogger(), Now: clk.now, TracerProvider: tp})
			var seen trace.SpanContext
			sent := http.Header{}
			exec.HandleFunc("k", func(ctx context.Context, _ *redrive.Job) error {
				seen = trace.SpanContextFromContext(ctx)
				propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(sent))
				return nil
			})
			if o := runOne(t, st, exec, clk, queue); o.Kind != store.Complete {
				t.Fatalf("outcome %v", o.Kind)
			}
			if !seen.IsValid() || seen.TraceID().String() != redrive.TraceID(job) || seen.SpanID().String() == enqSpan || seen.IsRemote() {
				t.Fatalf("handler's span context %v, want a new local span in the job's trace %s", seen, redrive.TraceID(job))
			}
			if seen.IsSampled() != tc.recorded {
				t.Errorf("attempt sampled %v, want %v", seen.IsSampled(), tc.recorded)
			}
			if got := sent.Get("traceparent"); !strings.HasPrefix(got, "00-"+redrive.TraceID(job)+"-"+seen.SpanID().String()+"-") {
				t.Errorf("handler's outgoing traceparent %q, want the attempt's span in the job's trace", got)
			}
			spans := rec.Ended()
			if !tc.recorded {
				if len(spans) != 0 {
					t.Errorf("%d spans recorded, want none", len(spans))
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans recorded, want the attempt's", len(spans))
			}
			s := spans[0]
			if s.SpanContext().SpanID() != seen.SpanID() || s.Parent().SpanID().String() != enqSpan || !s.Parent().IsRemote() {
				t.Errorf("attempt span %v with parent %v, want a child of the enqueue's span %s", s.SpanContext(), s.Parent(), enqSpan)
			}
			if !strings.HasPrefix(s.Name(), "process ") {
				t.Errorf("attempt span named %q", s.Name())
			}
		})
	}
	if n := len(enqRec.Ended()); n != 0 {
		t.Errorf("%d enqueue spans recorded by a sampler that samples none", n)
	}
}
