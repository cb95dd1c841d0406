package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// ExampleClientOptions_tracing traces a job: its enqueue inside the
// caller's span, an attempt that fails permanently and moves the job to
// the DLQ, all in the caller's trace. A program would give the client
// its SDK's tracer provider with an exporter (cmd/redrive's serve wires
// OTLP); this one records the spans in memory.
func ExampleClientOptions_tracing() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "redrive-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)

	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet, TracerProvider: tp})
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: quiet, TracerProvider: tp})
	exec.HandleFunc("charge", func(ctx context.Context, j *redrive.Job) error {
		return failure.Wrap(failure.Permanent, errors.New("card declined"))
	})

	reqCtx, request := tp.Tracer("shop").Start(ctx, "POST /orders")
	job, err := client.Enqueue(reqCtx, "charge", map[string]int{"order": 7}, redrive.InQueue("payments"))
	if err != nil {
		panic(err)
	}
	request.End()
	fmt.Println("same trace as the request:", redrive.TraceID(job) == request.SpanContext().TraceID().String())

	// What a Worker does: lease the job, run its attempt, apply the outcome.
	now := exec.Now()
	leased, err := st.Fetch(ctx, store.FetchParams{Queue: "payments", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: exec.ID()})
	if err != nil || len(leased) != 1 {
		panic(fmt.Sprint(len(leased), err))
	}
	outcome := exec.Execute(ctx, leased[0])
	if _, err := st.Finish(ctx, []redrive.Outcome{outcome}); err != nil {
		panic(err)
	}
	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), "in the request's trace:", s.SpanContext().TraceID() == request.SpanContext().TraceID())
	}
	// Output:
	// same trace as the request: true
	// send payments in the request's trace: true
	// POST /orders in the request's trace: true
	// dead_letter payments in the request's trace: true
	// process payments in the request's trace: true
}
