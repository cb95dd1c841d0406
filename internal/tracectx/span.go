package tracectx

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The messaging semantic conventions' attributes the transports' spans
// carry.
const (
	AttrSystem      = attribute.Key("messaging.system")
	AttrOpName      = attribute.Key("messaging.operation.name")
	AttrOpType      = attribute.Key("messaging.operation.type")
	AttrDestination = attribute.Key("messaging.destination.name")
	AttrMessageID   = attribute.Key("messaging.message.id")
	AttrBatchCount  = attribute.Key("messaging.batch.message_count")
	// AttrRedriveJobs is how many dead jobs a redrive moved (the root
	// package's redrive.AttrRedriveJobs).
	AttrRedriveJobs = attribute.Key("redrive.redrive.jobs")
)

// StartRedrive starts the span of the redrive of one dead letter of the
// messaging system system, with message id id, to dest: a producer child
// of ctx's span, linked to the trace the dead letter carries (tc, encoded
// as a job keeps it). tracer nil: no span, ctx as it is.
func StartRedrive(ctx context.Context, tracer trace.Tracer, system, dest, id, tc string) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		AttrSystem.String(system), AttrOpName.String("redrive"), AttrOpType.String("send"),
		AttrDestination.String(dest), AttrMessageID.String(id), AttrRedriveJobs.Int(1))}
	if sc, _ := Decode(tc); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrMessageID.String(id)}}))
	}
	return tracer.Start(ctx, "redrive "+dest, opts...)
}

// EndSpan ends span (nil: none), recording err as its failure when not
// nil.
func EndSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
