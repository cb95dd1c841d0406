package redrive_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
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

// TestTraceUnsampledRetryRedrive: a job enqueued in a trace its sampler
// did not sample keeps that context, stored, through a retry, the DLQ and
// a redrive: under a parent-based sampler whose root sampler samples
// everything, none of its attempts is sampled as a new root (each sees
// the unsampled remote parent), and each runs in the job's trace.
func TestTraceUnsampledRetryRedrive(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	enqTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	t.Cleanup(func() { enqTP.Shutdown(context.Background()) })
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: enqTP})
	redrive.SetClock(c, clk.now)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	policy := retry.Policy{MaxRetries: 1, Initial: time.Hour, Multiplier: 1, MaxDelay: time.Hour, Jitter: retry.JitterNone}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &policy, DisableRetryBudget: true, Logger: quietLogger(),
		Now: clk.now, TracerProvider: tp})
	var seen []trace.SpanContext
	exec.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		if j.Redriven > 0 {
			return nil
		}
		return failure.Wrap(failure.Transient, errors.New("connection reset"))
	})

	job, err := c.Enqueue(t.Context(), "k", nil, redrive.InQueue("urq"))
	if err != nil {
		t.Fatal(err)
	}
	if parts := strings.Split(job.Trace, "-"); len(parts) != 4 || parts[3] != "00" || redrive.TraceID(job) == "" {
		t.Fatalf("job's trace context %q, want a valid one, not sampled", job.Trace)
	}
	for i, want := range []store.OutcomeKind{store.Retry, store.Bury, store.Complete} {
		if i == 2 {
			clk.set(clk.now().Add(7 * 24 * time.Hour))
			if _, err := c.Redrive(t.Context(), redrive.RedriveRequest{IDs: []int64{job.ID}}); err != nil {
				t.Fatal(err)
			}
		}
		o := runOne(t, st, exec, clk, "urq")
		if o.Kind != want {
			t.Fatalf("attempt %d: outcome %v, want %v", i+1, o.Kind, want)
		}
		if o.Kind == store.Retry {
			clk.set(o.RunAt)
		}
		if got, err := st.Get(t.Context(), job.ID); err != nil || got.Trace != job.Trace {
			t.Fatalf("after attempt %d the job keeps trace %q (%v), want %q", i+1, got.Trace, err, job.Trace)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("%d attempts ran, want 3", len(seen))
	}
	for i, sc := range seen {
		if !sc.IsValid() || sc.TraceID().String() != redrive.TraceID(job) || sc.IsSampled() {
			t.Errorf("attempt %d: span context %v, want one in the job's trace %s, not sampled", i+1, sc, redrive.TraceID(job))
		}
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded, want none: no attempt is a new root", n)
	}
}
