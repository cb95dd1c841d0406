package kafka_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// TestKindMalformedTraceContext: a stored record produced back (Kind)
// whose traceparent header is malformed has no trace of its own: it is
// produced with the producing attempt's, as one without, so that its
// next attempts join the stored job's trace instead of each starting a
// new one (and being counted malformed again).
func TestKindMalformedTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	var got []*kgo.Record
	produce := func(ctx context.Context, r *kgo.Record) error { got = append(got, r); return nil }
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: testLogger(t), TracerProvider: tp})
	kafka.RegisterKind(exec, produce, kafka.KindOptions{Topics: []string{"scans"}})
	_, enqueue := tp.Tracer("test").Start(context.Background(), "send")
	enqueue.End()
	jobTrace := "00-" + enqueue.SpanContext().TraceID().String() + "-" + enqueue.SpanContext().SpanID().String() + "-01"
	for _, bad := range []string{"not a trace context", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""} {
		headers := []kafka.Header{{Key: "traceparent", Value: []byte(bad)}, {Key: "tracestate", Value: []byte("congo=t61rcWkgMzE")}}
		payload, _ := json.Marshal(kafka.Record{Topic: "scans", Value: []byte(`{}`), Headers: headers})
		got = nil
		o := exec.Execute(context.Background(), &redrive.Job{ID: 7, Queue: "scans", Kind: kafka.Kind, Payload: payload, Attempt: 1,
			MaxRetries: -1, Trace: jobTrace})
		if o.Kind != store.Complete || len(got) != 1 {
			t.Fatalf("outcome %+v, %d produced", o, len(got))
		}
		procs := spansNamed(rec, "process scans")
		attempt := procs[len(procs)-1].SpanContext()
		want := "00-" + attempt.TraceID().String() + "-" + attempt.SpanID().String() + "-01"
		if tp := header(got[0], "traceparent"); tp != want {
			t.Errorf("record with traceparent %q produced with %q, want the attempt's %q", bad, tp, want)
		}
		if ts := header(got[0], "tracestate"); ts != "" {
			t.Errorf("record with traceparent %q produced with the tracestate %q of the dropped traceparent", bad, ts)
		}
	}
}
