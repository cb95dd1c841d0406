package amqp

import (
	"context"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/tracectx"
)

// MessagingSystem is the messaging.system attribute of the spans of
// messages on RabbitMQ (OpenTelemetry's messaging semantic conventions).
const MessagingSystem = "rabbitmq"

// tableCarrier is a propagation.TextMapCarrier over a message's headers.
// A header that is not text (a client sent a number, a table) reads as
// absent.
type tableCarrier amqp091.Table

// Get returns the text of the header key, "" when absent or not text.
func (c tableCarrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// Set sets the header key to the text value.
func (c tableCarrier) Set(key, value string) { c[key] = value }

// Keys lists the headers.
func (c tableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

var w3c propagation.TraceContext

// InjectTrace sets the W3C trace context headers of a message, traceparent
// and (when there is one) tracestate, to the span context of ctx's span,
// so that the attempts of the message join its trace. It does nothing
// when ctx has no valid span context. h must not be nil. Publisher.Enqueue
// and EnqueueMany call it; call it on the headers of a message given to
// Publish.
func InjectTrace(ctx context.Context, h amqp091.Table) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	delete(h, tracectx.State) // a tracestate belongs with its traceparent
	w3c.Inject(ctx, tableCarrier(h))
}

// traceOf returns the trace context a message's headers carry, encoded
// as a job keeps it (store.Job.Trace): "" when they carry none, and when
// their traceparent is malformed, which is counted
// (redrive.MalformedTraceContexts) and otherwise ignored: the attempt
// starts a new trace. A tracestate that does not parse is dropped.
func traceOf(h amqp091.Table) string {
	_, ok := h[tracectx.Parent]
	return tracectx.FromHeaders(tableCarrier(h), ok)
}

// newTracer returns redrive's tracer of tp, nil when tp is nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(redrive.TracerName)
}

// startSend starts the span of a publish of msgs to queue ("" when they
// go to several), a producer child of ctx's span; tracer nil: none, ctx
// as it is.
func startSend(ctx context.Context, tracer trace.Tracer, queue string, msgs ...*amqp091.Publishing) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	name := "send"
	attrs := []attribute.KeyValue{tracectx.AttrSystem.String(MessagingSystem), tracectx.AttrOpName.String("send"), tracectx.AttrOpType.String("send")}
	if queue != "" {
		name += " " + queue
		attrs = append(attrs, tracectx.AttrDestination.String(queue))
	}
	if len(msgs) == 1 {
		attrs = append(attrs, tracectx.AttrMessageID.String(msgs[0].MessageId))
	} else {
		attrs = append(attrs, tracectx.AttrBatchCount.Int(len(msgs)))
	}
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// startRedrive starts the span of the redrive of a dead letter with
// message id id to queue: a producer child of ctx's span, linked to the
// trace the dead letter carries (tc, encoded as a job keeps it).
func startRedrive(ctx context.Context, tracer trace.Tracer, queue, id, tc string) (context.Context, trace.Span) {
	return tracectx.StartRedrive(ctx, tracer, MessagingSystem, queue, id, tc)
}
