package redrive_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// TestTraceReport: an attempt that ran outside redrive (a managed queue's
// consumer) and was reported with Executor.Report gets its span, from its
// start to its end, a child of the job's trace, with the executor's
// messaging system.
func TestTraceReport(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quietLogger(), TracerProvider: tp, MessagingSystem: "rabbitmq",
		DisableRetryBudget: true})
	_, send := tp.Tracer("test").Start(context.Background(), "send")
	send.End()
	sc := send.SpanContext()
	j := &redrive.Job{Queue: "q", Kind: "k", Attempt: 1, MaxRetries: -1, IdempotencyKey: "m1",
		Trace: "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"}
	start := time.Now()
	end := start.Add(time.Second)
	o := exec.Report(j, failure.Verdict{Class: failure.Transient}, "rejected", start, end)
	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process q" {
			spans = append(spans, s)
		}
	}
	if len(spans) != 1 {
		t.Fatalf("%d attempt spans, want 1 (outcome %v)", len(spans), o.Kind)
	}
	s := spans[0]
	if s.SpanContext().TraceID() != sc.TraceID() || s.Parent().SpanID() != sc.SpanID() {
		t.Errorf("attempt span in trace %s with parent %s, want a child of the send span", s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	if !s.StartTime().Equal(start) || !s.EndTime().Equal(end) {
		t.Errorf("attempt span from %s to %s, want the reported attempt's", s.StartTime(), s.EndTime())
	}
	for key, want := range map[string]string{"messaging.system": "rabbitmq", "messaging.message.id": "m1", "redrive.outcome": "retry"} {
		if v, _ := attrOf(s, attribute.Key(key)); v.AsString() != want {
			t.Errorf("%s = %q, want %q", key, v.AsString(), want)
		}
	}
}
