package amqp_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// newRecorder returns a tracer provider that samples everything into an
// in-memory recorder.
func newRecorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return rec, tp
}

// spansNamed returns the ended spans named name, by start time.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartTime().Before(out[j].StartTime()) })
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkAttrs fails the test for each attribute of s that is not as want
// says.
func checkAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	for k, v := range want {
		got, ok := attrOf(s, k)
		if !ok || got.AsInterface() != v {
			t.Errorf("%s: %s = %v (set %v), want %v", what, k, got.AsInterface(), ok, v)
		}
	}
}

// TestTraceRetriesDLQRedrive: a message published inside a span, whose
// attempts fail through every delay queue into the DLQ, then redriven and
// run to success, is one trace: the send span a child of the caller's,
// each attempt's span a child of the send span, the dead_letter span a
// child of the last failed attempt's, and the redrive's span a child of
// the operator's, linked to the message's trace.
func TestTraceRetriesDLQRedrive(t *testing.T) {
	t.Parallel()
	rec, tp := newRecorder(t)
	c := dial(t)
	q := newQueue(t, c)
	policy := retry.Policy{MaxRetries: 2, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: 40 * time.Millisecond,
		Jitter: retry.JitterNone}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t), Policy: &policy, DisableRetryBudget: true, TracerProvider: tp}})
	if err != nil {
		t.Fatal(err)
	}
	handlerSpans := make(chan trace.SpanContext, 8)
	done := make(chan struct{})
	cons.HandleFunc("sync", func(ctx context.Context, j *redrive.Job) error {
		handlerSpans <- trace.SpanContextFromContext(ctx)
		if j.Redriven > 0 {
			close(done)
			return nil
		}
		return errors.New("connection reset")
	})
	running(t, cons)
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	id, err := pub.Enqueue(ctx, "sync", map[string]int{"n": 1}, redrive.InQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	request.End()
	topo, _ := cons.Topology(q)
	eventually(t, "the message is in the DLQ", 30*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 1 })

	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	dlq.SetTracerProvider(tp)
	octx, operator := tp.Tracer("test").Start(context.Background(), "operator")
	if res, err := dlq.Redrive(octx, amqp.RedriveOptions{}); err != nil || res.Redriven != 1 {
		t.Fatalf("Redrive = %+v, %v", res, err)
	}
	operator.End()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a liveness bound
		t.Fatal("the redriven message did not run")
	}
	eventually(t, "four attempt spans ended", 10*time.Second, func() bool { return len(spansNamed(rec, "process "+q)) == 4 })

	traceID := request.SpanContext().TraceID()
	sends := spansNamed(rec, "send "+q)
	if len(sends) != 1 {
		t.Fatalf("%d send spans, want 1", len(sends))
	}
	send := sends[0]
	if send.Parent().SpanID() != request.SpanContext().SpanID() || send.SpanContext().TraceID() != traceID || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span: parent %s, trace %s, kind %v; want a producer child of the request", send.Parent().SpanID(), send.SpanContext().TraceID(), send.SpanKind())
	}
	checkAttrs(t, "send span", send, map[attribute.Key]any{"messaging.system": "rabbitmq", "messaging.destination.name": q,
		"messaging.message.id": id, "messaging.operation.type": "send"})
	type want struct {
		attempt int64
		outcome string
	}
	wants := []want{{1, "retry"}, {2, "retry"}, {3, "dead"}, {1, "completed"}}
	procs := spansNamed(rec, "process "+q)
	for i, s := range procs {
		if s.SpanContext().TraceID() != traceID || s.Parent().SpanID() != send.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d: trace %s parent %s kind %v; want a consumer child of the send span %s in trace %s",
				i, s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind(), send.SpanContext().SpanID(), traceID)
		}
		checkAttrs(t, "process span", s, map[attribute.Key]any{"messaging.system": "rabbitmq", "messaging.destination.name": q,
			"messaging.message.id": id, redrive.AttrJobAttempt: wants[i].attempt, redrive.AttrOutcome: wants[i].outcome})
		if hs := <-handlerSpans; !hs.Equal(s.SpanContext()) {
			t.Errorf("process span %d: the handler's context has span %s, want %s", i, hs.SpanID(), s.SpanContext().SpanID())
		}
	}
	dls := spansNamed(rec, "dead_letter "+q)
	if len(dls) != 1 || dls[0].Parent().SpanID() != procs[2].SpanContext().SpanID() {
		t.Errorf("dead_letter spans %d, want one, a child of the third attempt's", len(dls))
	} else {
		checkAttrs(t, "dead_letter span", dls[0], map[attribute.Key]any{"messaging.system": "rabbitmq"})
	}
	rds := spansNamed(rec, "redrive "+q)
	if len(rds) != 1 {
		t.Fatalf("%d redrive spans, want 1", len(rds))
	}
	rd := rds[0]
	if rd.Parent().SpanID() != operator.SpanContext().SpanID() || rd.SpanContext().TraceID() != operator.SpanContext().TraceID() {
		t.Errorf("redrive span is not a child of the operator's span")
	}
	if links := rd.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != traceID || links[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("redrive span links %v, want one to the message's send span", links)
	}
	checkAttrs(t, "redrive span", rd, map[attribute.Key]any{"messaging.system": "rabbitmq", "messaging.destination.name": q,
		"messaging.message.id": id})
}

// TestTraceMalformedHeader: a message whose traceparent does not parse
// runs as any other, its attempt in a new trace, and the bad header is
// counted.
func TestTraceMalformedHeader(t *testing.T) {
	t.Parallel()
	rec, tp := newRecorder(t)
	c := dial(t)
	q := newQueue(t, c)
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t), TracerProvider: tp}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	cons.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		if j.Trace != "" {
			t.Errorf("job's trace %q, want none", j.Trace)
		}
		close(done)
		return nil
	})
	running(t, cons)
	before := redrive.MalformedTraceContexts()
	publishRaw(t, c, q, amqp091.Publishing{Type: "k", Body: []byte("{}"),
		Headers: amqp091.Table{"traceparent": "00-not-a-trace-01", "tracestate": "a=b"}})
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a liveness bound
		t.Fatal("the message did not run")
	}
	eventually(t, "the attempt's span ended", 10*time.Second, func() bool { return len(spansNamed(rec, "process "+q)) == 1 })
	if s := spansNamed(rec, "process "+q)[0]; s.Parent().IsValid() {
		t.Errorf("attempt span has parent %s, want a new trace", s.Parent().SpanID())
	}
	if n := redrive.MalformedTraceContexts(); n <= before {
		t.Errorf("malformed trace contexts %d, want more than %d", n, before)
	}
}
