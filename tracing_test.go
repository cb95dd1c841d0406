package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// attrOf returns the value of the attribute key of span s.
func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// runOne leases the one due job of queue at the clock's time, runs its
// attempt and applies the outcome, as a worker would.
func runOne(t *testing.T, st store.Store, exec *redrive.Executor, clk *fakeClock, queue string) redrive.Outcome {
	t.Helper()
	ctx := t.Context()
	jobs, err := st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 1, Now: clk.now(), LeaseUntil: clk.now().Add(time.Hour), Worker: exec.ID()})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Fetch at %s: %d jobs, %v; want one", clk.now(), len(jobs), err)
	}
	o := exec.Execute(ctx, jobs[0])
	if applied, err := st.Finish(ctx, []store.Outcome{o}); err != nil || !applied[0] {
		t.Fatalf("Finish: %v, %v", applied, err)
	}
	return o
}

// TestTraceRetryDeadRedrive: a job enqueued inside a span fails three
// times (a Retry-After of two hours obeyed, then a transient failure an
// hour later), dies, is redriven a week later and succeeds. Every
// attempt, the retries hours later and the one after the redrive, is a
// child of the enqueue's span in the caller's trace, with its attributes;
// the move to the DLQ is a span of the last failed attempt; the redrive is
// a span of the operator's trace linked to the job's.
func TestTraceRetryDeadRedrive(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: tp})
	redrive.SetClock(c, clk.now)
	policy := retry.Policy{MaxRetries: 2, Initial: time.Hour, Multiplier: 1, MaxDelay: time.Hour, Jitter: retry.JitterNone,
		RetryAfterJitter: retry.NoRetryAfterJitter, MaxRetryAfter: 3 * time.Hour}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &policy, DisableRetryBudget: true, Logger: quietLogger(),
		Now: clk.now, TracerProvider: tp})
	var handlerSpans []trace.SpanContext
	exec.HandleFunc("sync", func(ctx context.Context, j *redrive.Job) error {
		handlerSpans = append(handlerSpans, trace.SpanContextFromContext(ctx))
		switch {
		case j.Redriven > 0:
			return nil
		case j.Attempt == 1:
			return failure.WrapRateLimited(errors.New("429 slow down"), 2*time.Hour)
		}
		return failure.Wrap(failure.Transient, errors.New("connection reset"))
	})

	ctx, request := tp.Tracer("test").Start(t.Context(), "request")
	job, err := c.Enqueue(ctx, "sync", map[string]int{"n": 1}, redrive.InQueue("tq"))
	if err != nil {
		t.Fatal(err)
	}
	request.End()
	if job.Trace == "" || redrive.TraceID(job) != request.SpanContext().TraceID().String() {
		t.Fatalf("enqueued job's trace %q (id %q), want one in the request's trace %s", job.Trace, redrive.TraceID(job), request.SpanContext().TraceID())
	}

	var starts []time.Time
	for attempt := 1; attempt <= 3; attempt++ {
		starts = append(starts, clk.now())
		o := runOne(t, st, exec, clk, "tq")
		if attempt < 3 {
			if o.Kind != store.Retry {
				t.Fatalf("attempt %d: outcome %v, want a retry", attempt, o.Kind)
			}
			clk.set(o.RunAt)
		} else if o.Kind != store.Bury {
			t.Fatalf("attempt 3: outcome %v, want the DLQ", o.Kind)
		}
	}
	clk.set(clk.now().Add(7 * 24 * time.Hour))
	octx, operator := tp.Tracer("test").Start(t.Context(), "operator")
	if _, err := c.Redrive(octx, redrive.RedriveRequest{IDs: []int64{job.ID}}); err != nil {
		t.Fatal(err)
	}
	operator.End()
	starts = append(starts, clk.now())
	if o := runOne(t, st, exec, clk, "tq"); o.Kind != store.Complete {
		t.Fatalf("attempt after the redrive: outcome %v, want complete", o.Kind)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if len(byName["send tq"]) != 1 || len(byName["process tq"]) != 4 || len(byName["dead_letter tq"]) != 1 || len(byName["redrive"]) != 1 {
		names := map[string]int{}
		for n, ss := range byName {
			names[n] = len(ss)
		}
		t.Fatalf("spans %v; want one send, four process, one dead_letter and one redrive", names)
	}
	send := byName["send tq"][0]
	traceID := request.SpanContext().TraceID()
	if send.Parent().SpanID() != request.SpanContext().SpanID() || send.SpanContext().TraceID() != traceID || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span: parent %s, trace %s, kind %v; want a producer child of the request", send.Parent().SpanID(), send.SpanContext().TraceID(), send.SpanKind())
	}
	if v, _ := attrOf(send, "messaging.message.id"); v.AsString() != strconv.FormatInt(job.ID, 10) {
		t.Errorf("send span message id %q, want %d", v.AsString(), job.ID)
	}
	type want struct {
		attempt int64
		outcome string
		class   string
	}
	wants := []want{{1, "retry", "rate_limited"}, {2, "retry", "transient"}, {3, "dead", "transient"}, {1, "completed", ""}}
	for i, s := range byName["process tq"] {
		w := wants[i]
		if s.SpanContext().TraceID() != traceID || s.Parent().SpanID() != send.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d: trace %s parent %s kind %v; want a consumer child of the send span %s in trace %s",
				i, s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind(), send.SpanContext().SpanID(), traceID)
		}
		if !s.StartTime().Equal(starts[i]) {
			t.Errorf("process span %d starts at %s, want the attempt's %s", i, s.StartTime(), starts[i])
		}
		if !handlerSpans[i].Equal(s.SpanContext()) {
			t.Errorf("process span %d: the handler's context has span %s, want the attempt's %s", i, handlerSpans[i].SpanID(), s.SpanContext().SpanID())
		}
		for key, v := range map[attribute.Key]any{"messaging.system": "redrive", "messaging.operation.type": "process",
			"messaging.destination.name": "tq", "messaging.message.id": strconv.FormatInt(job.ID, 10), redrive.AttrJobKind: "sync",
			redrive.AttrJobAttempt: w.attempt, redrive.AttrOutcome: w.outcome} {
			got, ok := attrOf(s, key)
			if !ok || got.AsInterface() != v {
				t.Errorf("process span %d: %s = %v (set %v), want %v", i, key, got.AsInterface(), ok, v)
			}
		}
		if got, _ := attrOf(s, redrive.AttrFailureClass); got.AsString() != w.class {
			t.Errorf("process span %d: failure class %q, want %q", i, got.AsString(), w.class)
		}
	}
	first := byName["process tq"][0]
	if v, _ := attrOf(first, redrive.AttrRetryAfterObeyed); !v.AsBool() {
		t.Errorf("first attempt: retry_after.obeyed %v, want true", v.AsBool())
	}
	if v, _ := attrOf(first, redrive.AttrRetryScheduledIn); v.AsFloat64() != (2 * time.Hour).Seconds() {
		t.Errorf("first attempt: scheduled in %vs, want 7200", v.AsFloat64())
	}
	if v, _ := attrOf(byName["process tq"][1], redrive.AttrRetryDelay); v.AsFloat64() != time.Hour.Seconds() {
		t.Errorf("second attempt: retry delay %vs, want 3600", v.AsFloat64())
	}
	dl := byName["dead_letter tq"][0]
	if dl.Parent().SpanID() != byName["process tq"][2].SpanContext().SpanID() {
		t.Errorf("dead_letter span's parent %s, want the third attempt's span", dl.Parent().SpanID())
	}
	if v, _ := attrOf(dl, redrive.AttrDeadReason); v.AsString() != retry.ReasonExhausted {
		t.Errorf("dead_letter span's reason %q, want %q", v.AsString(), retry.ReasonExhausted)
	}
	rd := byName["redrive"][0]
	if rd.Parent().SpanID() != operator.SpanContext().SpanID() || rd.SpanContext().TraceID() != operator.SpanContext().TraceID() {
		t.Errorf("redrive span is not a child of the operator's span")
	}
	if links := rd.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != traceID || links[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("redrive span links %v, want one to the job's enqueue span", links)
	}
}

// TestTraceNone: without a tracer provider or a span in the caller's
// context, a job keeps no trace context and its attempt runs as before.
func TestTraceNone(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	redrive.SetClock(c, clk.now)
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quietLogger(), Now: clk.now})
	exec.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("attempt's context has a span context without any trace")
		}
		return nil
	})
	job, err := c.Enqueue(t.Context(), "k", nil, redrive.InQueue("nq"))
	if err != nil || job.Trace != "" {
		t.Fatalf("Enqueue: trace %q, %v; want none", job.Trace, err)
	}
	if o := runOne(t, st, exec, clk, "nq"); o.Kind != store.Complete {
		t.Fatalf("outcome %v", o.Kind)
	}
}

// TestTraceLogs: the engine's log lines about a traced job (its retry
// scheduled, its move to the DLQ) carry the job's trace_id and span_id,
// those of the span that enqueued it; an untraced job's carry neither.
func TestTraceLogs(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log, TracerProvider: tp})
	redrive.SetClock(c, clk.now)
	policy := retry.Policy{MaxRetries: 1, Initial: time.Minute, Multiplier: 1, MaxDelay: time.Minute, Jitter: retry.JitterNone}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &policy, DisableRetryBudget: true, Logger: log, Now: clk.now, TracerProvider: tp})
	exec.HandleFunc("k", func(context.Context, *redrive.Job) error { return errors.New("boom") })
	ctx, span := tp.Tracer("test").Start(t.Context(), "request")
	traced, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("lq"))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	untraced := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	redrive.SetClock(untraced, clk.now)
	plain, err := untraced.Enqueue(t.Context(), "k", nil, redrive.InQueue("lq2"))
	if err != nil {
		t.Fatal(err)
	}
	runOne(t, st, exec, clk, "lq") // retry scheduled
	clk.set(clk.now().Add(time.Hour))
	runOne(t, st, exec, clk, "lq")  // dead
	runOne(t, st, exec, clk, "lq2") // retry scheduled, untraced
	tid, sid := redrive.TraceID(traced), ""
	if parts := strings.Split(traced.Trace, "-"); len(parts) == 4 {
		sid = parts[2]
	}
	if tid != span.SpanContext().TraceID().String() || sid == "" {
		t.Fatalf("job in trace %q span %q, want the request's trace", tid, sid)
	}
	seen := map[string]bool{}
	for _, rec := range buf.lines() {
		line, _ := json.Marshal(rec)
		id, ok := rec["job_id"].(float64)
		if !ok {
			continue
		}
		switch int64(id) {
		case traced.ID:
			seen[rec["msg"].(string)] = true
			if rec["trace_id"] != tid || rec["span_id"] != sid {
				t.Errorf("line about the traced job without its trace: %s", line)
			}
		case plain.ID:
			seen["plain"] = true
			if _, ok := rec["trace_id"]; ok {
				t.Errorf("line about an untraced job with a trace id: %s", line)
			}
		}
	}
	for _, msg := range []string{"job failed; retry scheduled", "job moved to the DLQ", "plain"} {
		if !seen[msg] {
			t.Errorf("no line %q about the jobs: %v", msg, buf.lines())
		}
	}
}

// TestTraceLateness: the attempt's span says how long after it was due
// the attempt started (a queue's wait, a limit's or a fair queue's hold).
func TestTraceLateness(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: tp})
	redrive.SetClock(c, clk.now)
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quietLogger(), Now: clk.now, TracerProvider: tp})
	exec.HandleFunc("k", func(context.Context, *redrive.Job) error { return nil })
	if _, err := c.Enqueue(t.Context(), "k", nil, redrive.InQueue("late")); err != nil {
		t.Fatal(err)
	}
	clk.set(clk.now().Add(90 * time.Second))
	runOne(t, st, exec, clk, "late")
	for _, s := range rec.Ended() {
		if s.Name() == "process late" {
			if v, ok := attrOf(s, redrive.AttrLateness); !ok || v.AsFloat64() != 90 {
				t.Errorf("attempt's %s = %v (found %v), want 90", redrive.AttrLateness, v.AsFloat64(), ok)
			}
			return
		}
	}
	t.Fatal("no attempt span")
}

// TestTraceReplay: a replay of a dead job is a span of the operator's
// trace linked to the job's; the copy's attempt joins the dead job's
// trace, a child of its enqueue span.
func TestTraceReplay(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: tp})
	redrive.SetClock(c, clk.now)
	policy := retry.Policy{MaxRetries: 0}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &policy, DisableRetryBudget: true, Logger: quietLogger(), Now: clk.now, TracerProvider: tp})
	exec.HandleFunc("k", func(_ context.Context, j *redrive.Job) error {
		if j.ReplayOf != 0 {
			return nil
		}
		return failure.Wrap(failure.Permanent, errors.New("no"))
	})
	ctx, request := tp.Tracer("test").Start(t.Context(), "request")
	_, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("rp"))
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	if o := runOne(t, st, exec, clk, "rp"); o.Kind != store.Bury {
		t.Fatalf("outcome %v, want dead", o.Kind)
	}
	octx, operator := tp.Tracer("test").Start(t.Context(), "operator")
	op, err := c.StartOperation(octx, redrive.OperationRequest{Kind: redrive.OperationReplay,
		Filter: redrive.Filter{Queue: "rp", States: []redrive.State{redrive.Dead}}})
	operator.End()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunOperation(t.Context(), op.ID, nil); err != nil {
		t.Fatal(err)
	}
	if o := runOne(t, st, exec, clk, "rp"); o.Kind != store.Complete {
		t.Fatalf("copy's outcome %v, want complete", o.Kind)
	}
	var send, replay sdktrace.ReadOnlySpan
	var process []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "send rp":
			send = s
		case "replay":
			replay = s
		case "process rp":
			process = append(process, s)
		}
	}
	if send == nil || replay == nil || len(process) != 2 {
		t.Fatalf("send %v, replay %v, %d process spans; want one, one and two", send != nil, replay != nil, len(process))
	}
	if replay.Parent().SpanID() != operator.SpanContext().SpanID() {
		t.Errorf("replay span's parent %s, want the operator's span", replay.Parent().SpanID())
	}
	if l := replay.Links(); len(l) != 1 || l[0].SpanContext.TraceID() != send.SpanContext().TraceID() || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("replay span's links %v, want one to the dead job's enqueue span", l)
	}
	if cp := process[1]; cp.SpanContext().TraceID() != request.SpanContext().TraceID() || cp.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Errorf("the copy's attempt in trace %s under %s, want the dead job's trace under its enqueue span", cp.SpanContext().TraceID(), cp.Parent().SpanID())
	}
}

// TestTraceContextBelowClient: a job enqueued on the store directly (as
// in the caller's transaction) with TraceContext of the caller's context
// joins the caller's trace: its attempt is a child of the caller's span.
// Without a span, TraceContext is "".
func TestTraceContextBelowClient(t *testing.T) {
	if got := redrive.TraceContext(t.Context()); got != "" {
		t.Fatalf("TraceContext without a span = %q, want \"\"", got)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := openStore(t)
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quietLogger(), Now: clk.now, TracerProvider: tp})
	exec.HandleFunc("k", func(context.Context, *redrive.Job) error { return nil })
	ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
	if _, err := st.Enqueue(ctx, []store.NewJob{{Queue: "tq", Kind: "k", Payload: json.RawMessage(`{}`), MaxRetries: -1,
		Trace: redrive.TraceContext(ctx)}}, clk.now()); err != nil {
		t.Fatal(err)
	}
	caller.End()
	runOne(t, st, exec, clk, "tq")
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() == "process tq" {
			found = true
			if s.SpanContext().TraceID() != caller.SpanContext().TraceID() || s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("attempt in trace %s with parent %s, want a child of the caller's span %s", s.SpanContext().TraceID(), s.Parent().SpanID(), caller.SpanContext().SpanID())
			}
		}
	}
	if !found {
		t.Fatal("no attempt span")
	}
}
