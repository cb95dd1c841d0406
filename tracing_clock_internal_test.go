package redrive

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestWorkerSpanClock: a worker's executor reads its client's clock. With
// the real clock its attempt spans take no timestamp option (the SDK reads
// the same moment, and a span not sampled allocates nothing for it); with
// an injected clock every attempt span starts and ends at that clock's
// readings.
func TestWorkerSpanClock(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	real := NewWorker(NewClient(st, ClientOptions{Logger: quiet, TracerProvider: tp}), WorkerOptions{Logger: quiet, Queues: map[string]int{"q": 1}})
	if real.exec.clocked {
		t.Errorf("a worker of a client on the real clock stamps its spans")
	}

	clk := &fakeClock{}
	clk.set(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	c := NewClient(st, ClientOptions{Logger: quiet, TracerProvider: tp})
	c.setClock(clk.now)
	w := NewWorker(c, WorkerOptions{Logger: quiet, Queues: map[string]int{"q": 1}})
	if !w.exec.clocked {
		t.Fatalf("a worker of a client on an injected clock does not stamp its spans")
	}
	w.exec.HandleFunc("k", func(context.Context, *Job) error { return nil })
	j := &Job{ID: 1, Queue: "q", Kind: "k", State: store.Running, Attempt: 1, RunAt: clk.now()}
	if o := w.exec.Execute(t.Context(), j); o.Kind != store.Complete {
		t.Fatalf("outcome %v", o.Kind)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want the attempt's", len(spans))
	}
	if s := spans[0]; !s.StartTime().Equal(clk.now()) || !s.EndTime().Equal(clk.now()) {
		t.Errorf("attempt span from %s to %s, want both at the injected clock's %s", s.StartTime(), s.EndTime(), clk.now())
	}
}
