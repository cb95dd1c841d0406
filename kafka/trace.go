package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/tracectx"
)

// MessagingSystem is the messaging.system attribute of the spans of
// records on Kafka (OpenTelemetry's messaging semantic conventions).
const MessagingSystem = "kafka"

// recordCarrier is a propagation.TextMapCarrier over a record's headers:
// the last header of a name is its value, as everywhere in redrive.
type recordCarrier struct{ r *kgo.Record }

// Get returns the value of the last header key, "" when absent.
func (c recordCarrier) Get(key string) string {
	v, _ := header(c.r, key)
	return v
}

// Set replaces the headers key with one of value.
func (c recordCarrier) Set(key, value string) {
	kept := c.r.Headers[:0]
	for _, h := range c.r.Headers {
		if h.Key != key {
			kept = append(kept, h)
		}
	}
	c.r.Headers = append(kept, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys lists the headers' names.
func (c recordCarrier) Keys() []string {
	keys := make([]string, 0, len(c.r.Headers))
	for _, h := range c.r.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}

var w3c propagation.TraceContext

// InjectTrace sets the W3C trace context headers of r, traceparent and
// (when there is one) tracestate, to the span context of ctx's span, so
// that the attempts of the record join its trace; it does nothing when
// ctx has no valid span context. Call it on a record before producing it
// (franz-go's kotel plugin writes the same headers).
func InjectTrace(ctx context.Context, r *kgo.Record) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	kept := r.Headers[:0] // a tracestate belongs with its traceparent
	for _, h := range r.Headers {
		if h.Key != tracectx.State {
			kept = append(kept, h)
		}
	}
	r.Headers = kept
	w3c.Inject(ctx, recordCarrier{r})
}

// traceOf returns the trace context r's headers carry, encoded as a job
// keeps it (store.Job.Trace): "" when they carry none, and when their
// traceparent is malformed, which is counted
// (redrive.MalformedTraceContexts) and otherwise ignored: the attempt
// starts a new trace. A tracestate that does not parse is dropped.
func traceOf(r *kgo.Record) string {
	_, ok := header(r, tracectx.Parent)
	return tracectx.FromHeaders(recordCarrier{r}, ok)
}

// newTracer returns redrive's tracer of tp, nil when tp is nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(redrive.TracerName)
}

// startRedrive starts the span of the redrive of a dead letter with
// message id id to topic: a producer child of ctx's span, linked to the
// trace the dead letter carries (tc, encoded as a job keeps it); tracer
// nil: none, ctx as it is.
func startRedrive(ctx context.Context, tracer trace.Tracer, topic, id, tc string) (context.Context, trace.Span) {
	return tracectx.StartRedrive(ctx, tracer, MessagingSystem, topic, id, tc)
}
