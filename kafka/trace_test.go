package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

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

// checkAttrs fails the test for each attribute of s that is not as want
// says.
func checkAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	for k, v := range want {
		var got attribute.Value
		ok := false
		for _, kv := range s.Attributes() {
			if kv.Key == k {
				got, ok = kv.Value, true
			}
		}
		if !ok || got.AsInterface() != v {
			t.Errorf("%s: %s = %v (set %v), want %v", what, k, got.AsInterface(), ok, v)
		}
	}
}

// TestTraceTiersDLTRedrive: a record produced inside a span, whose
// attempts fail through every retry tier into the DLT, then redriven and
// run to success, is one trace, in both delivery modes: each attempt's
// span a child of the producer's span, the dead_letter span a child of
// the last failed attempt's, and the redrive's span a child of the
// operator's, linked to the record's trace.
func TestTraceTiersDLTRedrive(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testTraceTiersDLTRedrive(t, mode)
		})
	}
}

func testTraceTiersDLTRedrive(t *testing.T, mode kafka.Mode) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	c := newCluster(t)
	topic := newTopic(t)
	policy := retry.Policy{MaxRetries: 2, Initial: 50 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &policy, Logger: testLogger(t), DisableRetryBudget: true, TracerProvider: tp}})
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
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	r, err := kafka.NewRecord(topic, "sync", map[string]int{"n": 1}, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	kafka.InjectTrace(ctx, r)
	c.produce(t, c.client(t), r)
	request.End()
	topo, _ := cons.Topology(topic)
	c.readAll(t, topo.DLT(), 1)

	dlt, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dlt.Close)
	octx, operator := tp.Tracer("test").Start(context.Background(), "operator")
	redriven := 0
	eventually(t, "the dead letter is redriven", 30*time.Second, func() bool {
		res, err := dlt.Redrive(octx, kafka.RedriveOptions{})
		if err != nil {
			t.Fatalf("Redrive: %v", err)
		}
		redriven += res.Redriven
		return redriven > 0
	})
	operator.End()
	select {
	case <-done:
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("the redriven record did not run")
	}
	eventually(t, "four attempt spans ended", 10*time.Second, func() bool { return len(spansNamed(rec, "process "+topic)) == 4 })

	traceID, parent := request.SpanContext().TraceID(), request.SpanContext().SpanID()
	id := topic + "/0/0"
	wants := []struct {
		attempt int64
		outcome string
	}{{1, "retry"}, {2, "retry"}, {3, "dead"}, {1, "completed"}}
	procs := spansNamed(rec, "process "+topic)
	for i, s := range procs {
		if s.SpanContext().TraceID() != traceID || s.Parent().SpanID() != parent || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d: trace %s parent %s kind %v; want a consumer child of the producer's span %s in trace %s",
				i, s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind(), parent, traceID)
		}
		checkAttrs(t, "process span", s, map[attribute.Key]any{"messaging.system": "kafka", "messaging.destination.name": topic,
			"messaging.message.id": id, redrive.AttrJobAttempt: wants[i].attempt, redrive.AttrOutcome: wants[i].outcome})
		if hs := <-handlerSpans; !hs.Equal(s.SpanContext()) {
			t.Errorf("process span %d: the handler's context has span %s, want %s", i, hs.SpanID(), s.SpanContext().SpanID())
		}
	}
	if dls := spansNamed(rec, "dead_letter "+topic); len(dls) != 1 || dls[0].Parent().SpanID() != procs[2].SpanContext().SpanID() {
		t.Errorf("dead_letter spans %d, want one, a child of the third attempt's", len(dls))
	}
	rds := spansNamed(rec, "redrive "+topic)
	if len(rds) != 1 {
		t.Fatalf("%d redrive spans, want 1", len(rds))
	}
	rd := rds[0]
	if rd.Parent().SpanID() != operator.SpanContext().SpanID() || rd.SpanContext().TraceID() != operator.SpanContext().TraceID() {
		t.Errorf("redrive span is not a child of the operator's span")
	}
	if links := rd.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != traceID || links[0].SpanContext.SpanID() != parent {
		t.Errorf("redrive span links %v, want one to the record's producer span", links)
	}
	checkAttrs(t, "redrive span", rd, map[attribute.Key]any{"messaging.system": "kafka", "messaging.destination.name": topic,
		"messaging.message.id": id})
}

// TestTraceMalformedHeader: a record whose traceparent does not parse
// runs as any other, its attempt in a new trace, and the bad header is
// counted.
func TestTraceMalformedHeader(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	c := newCluster(t)
	topic := newTopic(t)
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
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
	r, _ := kafka.NewRecord(topic, "k", map[string]int{}, nil)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-zz-01")})
	c.produce(t, c.client(t), r)
	select {
	case <-done:
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("the record did not run")
	}
	eventually(t, "the attempt's span ended", 10*time.Second, func() bool { return len(spansNamed(rec, "process "+topic)) == 1 })
	if s := spansNamed(rec, "process "+topic)[0]; s.Parent().IsValid() {
		t.Errorf("attempt span has parent %s, want a new trace", s.Parent().SpanID())
	}
	if n := redrive.MalformedTraceContexts(); n <= before {
		t.Errorf("malformed trace contexts %d, want more than %d", n, before)
	}
}

// TestKindTraceContext: a stored record produced back (Kind) keeps its
// own traceparent; one without takes the context of the attempt that
// produces it, so its next attempts join the stored job's trace.
func TestKindTraceContext(t *testing.T) {
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
	const own = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, headers := range [][]kafka.Header{nil, {{Key: "traceparent", Value: []byte(own)}}} {
		payload, _ := json.Marshal(kafka.Record{Topic: "scans", Value: []byte(`{}`), Headers: headers})
		got = nil
		o := exec.Execute(context.Background(), &redrive.Job{ID: 7, Queue: "scans", Kind: kafka.Kind, Payload: payload, Attempt: 1,
			MaxRetries: -1, Trace: jobTrace})
		if o.Kind != store.Complete || len(got) != 1 {
			t.Fatalf("outcome %+v, %d produced", o, len(got))
		}
		tp := header(got[0], "traceparent")
		if headers != nil {
			if tp != own {
				t.Errorf("record with its own traceparent produced with %q, want it kept", tp)
			}
			continue
		}
		procs := spansNamed(rec, "process scans")
		attempt := procs[len(procs)-1].SpanContext()
		if want := "00-" + attempt.TraceID().String() + "-" + attempt.SpanID().String() + "-01"; tp != want {
			t.Errorf("record without a traceparent produced with %q, want the attempt's %q", tp, want)
		}
		if attempt.TraceID() != enqueue.SpanContext().TraceID() {
			t.Errorf("the attempt is not in the job's trace")
		}
	}
}
