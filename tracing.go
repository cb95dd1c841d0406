package redrive

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/store"
)

// TracerName is the name of the tracer redrive's spans come from (the
// OpenTelemetry instrumentation scope).
const TracerName = "github.com/redrivehq/redrive"

// The attributes of redrive's spans beyond OpenTelemetry's messaging
// semantic conventions (see docs/design.md, "Tracing").
const (
	AttrJobKind          = attribute.Key("redrive.job.kind")
	AttrJobAttempt       = attribute.Key("redrive.job.attempt")
	AttrOutcome          = attribute.Key("redrive.outcome")
	AttrFailureClass     = attribute.Key("redrive.failure.class")
	AttrReason           = attribute.Key("redrive.reason")
	AttrRetryDelay       = attribute.Key("redrive.retry.delay")
	AttrRetryScheduledIn = attribute.Key("redrive.retry.scheduled_in")
	AttrRetryAfter       = attribute.Key("redrive.retry_after")
	AttrRetryAfterObeyed = attribute.Key("redrive.retry_after.obeyed")
	AttrDependency       = attribute.Key("redrive.dependency")
	AttrBreakerState     = attribute.Key("redrive.breaker.state")
	AttrDeadReason       = attribute.Key("redrive.dead.reason")
	AttrFingerprint      = attribute.Key("redrive.fingerprint")
	AttrRedriveJobs      = tracectx.AttrRedriveJobs
	AttrLateness         = attribute.Key("redrive.job.lateness")
	AttrUntil            = attribute.Key("redrive.until")
)

// The messaging semantic conventions' attributes redrive's spans carry.
const (
	attrSystem      = tracectx.AttrSystem
	attrOpName      = tracectx.AttrOpName
	attrOpType      = tracectx.AttrOpType
	attrDestination = tracectx.AttrDestination
	attrMessageID   = tracectx.AttrMessageID
	attrBatchCount  = tracectx.AttrBatchCount
	attrErrorType   = attribute.Key("error.type")
)

// messagingSystem is the messaging.system of redrive's own spans.
const messagingSystem = "redrive"

// The options of the spans redrive starts, without a timestamp: with the
// real clock the SDK's own reading is the same moment, and a span not
// sampled then costs no allocation for its options (its cost is its
// allocations: see docs/BENCHMARKS.md, "Tracing").
var (
	producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// spanStart returns the options opts with the start time at when stamped
// (an injected clock, or a time given), opts itself otherwise.
func spanStart(opts []trace.SpanStartOption, at time.Time, stamped bool) []trace.SpanStartOption {
	if !stamped {
		return opts
	}
	return append(opts[:len(opts):len(opts)], trace.WithTimestamp(at))
}

// endSpan ends span at end when it is recorded; a span that is not has
// no time to keep.
func endSpan(span trace.Span, end time.Time) {
	if span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	span.End()
}

// newTracer returns redrive's tracer of tp, nil (no tracing) when tp is
// nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName)
}

// TraceID returns the id of the trace a job was enqueued in (its
// enqueue's span), "" when it was enqueued outside any trace or its trace
// context cannot be read.
func TraceID(j *Job) string {
	sc, _ := tracectx.Decode(j.Trace)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// TraceContext returns the W3C trace context of ctx's span as a job keeps
// it (store.NewJob.Trace: the traceparent, then a space and the
// tracestate), "" when ctx has no valid span. A job enqueued below the
// Client, as with the PostgreSQL store's EnqueueTx inside the caller's
// transaction, joins the caller's trace with it: its attempts are
// children of ctx's span.
func TraceContext(ctx context.Context) string {
	return tracectx.Encode(trace.SpanContextFromContext(ctx))
}

// MalformedTraceContexts returns how many trace contexts this process
// found malformed (a job's, a message's, a request's) and ignored,
// starting a new trace instead.
func MalformedTraceContexts() int64 { return tracectx.Malformed.Load() }

// startEnqueue starts the span of an enqueue of jobs, a child of ctx's
// span, and gives each job its trace context.
func (c *Client) startEnqueue(ctx context.Context, jobs []store.NewJob, now time.Time) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, "send", spanStart(producerSpan, now, c.clocked)...)
	if tc := tracectx.Encode(span.SpanContext()); tc != "" {
		for i := range jobs {
			jobs[i].Trace = tc
		}
	}
	if span.IsRecording() {
		q := jobs[0].Queue
		for i := range jobs {
			if jobs[i].Queue != q {
				q = ""
				break
			}
		}
		attrs := []attribute.KeyValue{attrSystem.String(messagingSystem), attrOpName.String("send"), attrOpType.String("send")}
		if q != "" {
			span.SetName("send " + q)
			attrs = append(attrs, attrDestination.String(q))
		}
		if len(jobs) > 1 {
			attrs = append(attrs, attrBatchCount.Int(len(jobs)))
		} else {
			attrs = append(attrs, AttrJobKind.String(jobs[0].Kind))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// endEnqueue ends the span of an enqueue that stored jobs or failed with
// err.
func (c *Client) endEnqueue(span trace.Span, jobs []*Job, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(jobs) == 1 {
			span.SetAttributes(attrMessageID.String(strconv.FormatInt(jobs[0].ID, 10)))
		}
	}
	endSpan(span, c.now())
}

// startAttempt starts the span of an attempt of j at start (stamped: the
// SDK's clock reads the same moment otherwise): a child of the span that
// enqueued j (its Trace), or of ctx's span when j has none.
func (e *Executor) startAttempt(ctx context.Context, j *Job, start time.Time, stamped bool) (context.Context, trace.Span) {
	if j.Trace != "" {
		if sc, ok := tracectx.Decode(j.Trace); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		} else {
			e.log.Debug("job's trace context is malformed; its attempt starts a new trace", jobAttr(j))
		}
	}
	return e.tracer.Start(ctx, "process", spanStart(consumerSpan, start, stamped)...)
}

// messageID is the messaging.message.id of j: its id, or for a broker
// message without one, its idempotency key.
func messageID(j *Job) string {
	if j.ID == 0 && j.IdempotencyKey != "" {
		return j.IdempotencyKey
	}
	return strconv.FormatInt(j.ID, 10)
}

// endAttempt ends the span of the attempt of j whose outcome is o, run
// under the breaker br (nil: none).
func (e *Executor) endAttempt(span trace.Span, j *Job, o *Outcome, br *breaker.Breaker) {
	end := o.At
	if end.IsZero() {
		end = e.now()
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetName("process " + j.Queue)
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs, attrSystem.String(e.opts.MessagingSystem), attrOpName.String("process"), attrOpType.String("process"),
		attrDestination.String(j.Queue), attrMessageID.String(messageID(j)), AttrJobKind.String(j.Kind),
		AttrJobAttempt.Int(j.Attempt), AttrOutcome.String(string(outcomeOf(o))))
	if o.Kind == store.Retry || o.Kind == store.Bury {
		attrs = append(attrs, AttrFailureClass.String(o.Class.String()), attrErrorType.String(o.Class.String()))
	}
	if o.Event != nil && o.Event.Reason != "" {
		attrs = append(attrs, AttrReason.String(o.Event.Reason))
	}
	if o.Kind == store.Retry {
		attrs = append(attrs, AttrRetryDelay.Float64(time.Duration(o.RetryDelay).Seconds()),
			AttrRetryScheduledIn.Float64(o.RunAt.Sub(o.At).Seconds()))
	}
	if !o.HoldUntil.IsZero() {
		// The server's Retry-After (clamped): obeyed when the next run is
		// not before it.
		attrs = append(attrs, AttrRetryAfter.Float64(o.HoldUntil.Sub(o.At).Seconds()))
		if o.Kind == store.Retry {
			attrs = append(attrs, AttrRetryAfterObeyed.Bool(!o.RunAt.Before(o.HoldUntil)))
		}
	}
	if br != nil {
		attrs = append(attrs, AttrDependency.String(br.Name()), AttrBreakerState.String(br.State().String()))
	}
	if j.AttemptedAt != nil {
		// How long after it was due the attempt started: the queue's
		// wait, and any wait on a concurrency limit's slots, its rate, a
		// Retry-After hold of its group or a fair queue's turn (the store
		// leases the job only then, and does not say which held it).
		attrs = append(attrs, AttrLateness.Float64(max(0, j.AttemptedAt.Sub(j.RunAt).Seconds())))
	}
	span.SetAttributes(attrs...)
	if o.Event != nil && o.Event.Kind == store.EventDeferred {
		// A wait on an open breaker: no attempt used, the job runs again
		// when it half-opens.
		span.AddEvent("breaker_open", trace.WithTimestamp(end), trace.WithAttributes(
			AttrReason.String(o.Event.Reason), AttrUntil.String(o.RunAt.UTC().Format(time.RFC3339Nano))))
	}
	switch o.Kind {
	case store.Retry, store.Bury:
		span.SetStatus(codes.Error, o.Error)
	case store.Cancel:
		span.SetStatus(codes.Error, "canceled")
	}
	if o.Kind == store.Bury {
		// The move to the DLQ: a settlement of the message, in the
		// attempt's trace.
		ctx := trace.ContextWithSpan(context.Background(), span)
		_, dl := e.tracer.Start(ctx, "dead_letter "+j.Queue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(end),
			trace.WithAttributes(attrSystem.String(e.opts.MessagingSystem), attrOpName.String("dead_letter"), attrOpType.String("settle"),
				attrDestination.String(j.Queue), attrMessageID.String(messageID(j)), AttrDeadReason.String(o.DeadReason),
				AttrFingerprint.String(o.Fingerprint)))
		dl.End(trace.WithTimestamp(end))
	}
	span.End(trace.WithTimestamp(end))
}

// startRedrive starts the span of a redrive or a replay (op), a child of
// ctx's span.
func (c *Client) startRedrive(ctx context.Context, op string) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(c.now()),
		trace.WithAttributes(attrSystem.String(messagingSystem), attrOpName.String(op), attrOpType.String("send")))
}

// maxRedriveLinks bounds the links of one redrive span to the traces of
// the jobs it redrove (an SDK keeps 128 by default).
const maxRedriveLinks = 128

// linkJobs links span to the traces of jobs (those that have one), up to
// maxRedriveLinks in all; n is how many it linked before.
func linkJobs(span trace.Span, jobs []*Job, n *int) {
	for _, j := range jobs {
		if *n >= maxRedriveLinks {
			return
		}
		sc, _ := tracectx.Decode(j.Trace)
		if !sc.IsValid() {
			continue
		}
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrMessageID.String(messageID(j))}})
		*n++
	}
}

// endOperationSpan ends the span of the start of the bulk redrive or
// replay n (err: it failed), linked to the traces of the first jobs it
// selects, read in ctx.
func (c *Client) endOperationSpan(ctx context.Context, span trace.Span, n store.NewOperation, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("redrive.operation.id", n.ID))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			op := store.Operation{Kind: n.Kind, Params: n.Params}
			if got, lerr := c.store.List(ctx, store.OperationFilter(&op), store.Page{Limit: maxRedriveLinks}); lerr == nil {
				links := 0
				linkJobs(span, got.Jobs, &links)
			}
		}
	}
	span.End(trace.WithTimestamp(c.now()))
}
