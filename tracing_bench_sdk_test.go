package redrive_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// keepTrace keeps the trace context of the new job nj in j, as a store
// does.
func keepTrace(j *store.Job, nj *store.NewJob) { j.Trace = nj.Trace }

// BenchmarkEnqueueAttemptTraced is BenchmarkEnqueueAttempt with the
// OpenTelemetry SDK, spans recorded in memory (no exporter): the sampler
// samples every trace (always), 1% of them (ratio), or none (never).
func BenchmarkEnqueueAttemptTraced(b *testing.B) {
	for _, s := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"always", sdktrace.AlwaysSample()}, {"ratio-1pct", sdktrace.TraceIDRatioBased(0.01)}, {"never", sdktrace.NeverSample()}} {
		b.Run(s.name, func(b *testing.B) {
			rec := tracetest.NewNoopExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(s.sampler)), sdktrace.WithSyncer(rec))
			defer tp.Shutdown(context.Background())
			benchEnqueueAttempt(b, redrive.ClientOptions{Logger: quietLogger(), TracerProvider: tp},
				redrive.ExecutorOptions{Logger: quietLogger(), DisableRetryBudget: true, TracerProvider: tp})
		})
	}
}
