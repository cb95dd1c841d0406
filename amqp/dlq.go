package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/internal/transport"
	"github.com/redrivehq/redrive/store"
)

// MaxPeek bounds how many dead letters one Peek reads.
const MaxPeek = 1000

// DLQ operates on the dead-letter queue of one work queue: count, peek,
// redrive and purge. It declares nothing: the queues must exist.
type DLQ struct {
	conn   *Conn
	topo   Topology
	pub    *Publisher
	tracer trace.Tracer // nil: no spans
	bodies *redrive.SealedBodies
}

// SetBodies makes Peek open the bodies marked sealed
// (redrive.HeaderSealed) with b's keys; without it, or without the key,
// they show sealed, with DeadLetter.BodyError. Redrive never opens a
// body: it publishes it back as it is, sealed.
func (q *DLQ) SetBodies(b *redrive.SealedBodies) { q.bodies = b }

// NewDLQ returns the operations on the dead letters of the work queue
// named queue (whose DLQ is <queue>-dlq).
func NewDLQ(conn *Conn, queue string) (*DLQ, error) {
	t := Topology{Queue: queue}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	pub, err := NewPublisher(conn, PublisherOptions{})
	if err != nil {
		return nil, err
	}
	return &DLQ{conn: conn, topo: t, pub: pub}, nil
}

// SetTracerProvider makes Redrive start a span for each dead letter it
// redrives, a child of the caller's span linked to the trace the dead
// letter carries (nil: none). Call it before any Redrive.
func (q *DLQ) SetTracerProvider(tp trace.TracerProvider) { q.tracer = newTracer(tp) }

// Name returns the dead-letter queue's name.
func (q *DLQ) Name() string { return q.topo.DLQ() }

// Close releases the DLQ's publishing channel.
func (q *DLQ) Close() error { return q.pub.Close() }

// Count returns how many messages wait in the DLQ (ready ones; messages a
// consumer holds unacknowledged are not counted by the broker).
func (q *DLQ) Count(ctx context.Context) (int, error) {
	ch, err := q.conn.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q.topo.DLQ(), true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("amqp: dead-letter queue %q: %w", q.topo.DLQ(), err)
	}
	return st.Messages, nil
}

// DeadLetter is a message in a DLQ, as Peek reads it.
type DeadLetter struct {
	MessageID   string    `json:"message_id"`
	Kind        string    `json:"kind"`
	ContentType string    `json:"content_type,omitempty"`
	Body        []byte    `json:"body"`
	Timestamp   time.Time `json:"timestamp,omitzero"`
	// Origin is the work queue it died in.
	Origin string `json:"origin"`
	// Reason, Class, Error and Cause say why it died (see HeaderReason
	// and the others); a message dead-lettered by the broker itself
	// (rejected by another consumer, over its delivery limit) has the
	// broker's reason, from x-death, and no class.
	Reason string `json:"reason"`
	Class  string `json:"class,omitempty"`
	Error  string `json:"error,omitempty"`
	Cause  string `json:"cause,omitempty"`
	// DeadAt is when it died (zero if unknown).
	DeadAt time.Time `json:"dead_at,omitzero"`
	// Attempts is how many attempts it used.
	Attempts int `json:"attempts"`
	// Redriven counts its earlier redrives.
	Redriven int `json:"redriven"`
	// History is its attempt history, oldest first (bounded: see
	// HistoryDropped).
	History        []redrive.Event `json:"history"`
	HistoryDropped int             `json:"history_dropped,omitempty"`
	// Headers are all its headers, as the broker holds them.
	Headers amqp091.Table `json:"headers,omitempty"`
	// Problem is set when redrive's headers cannot be read.
	Problem string `json:"problem,omitempty"`
	// Sealed is the key id of a body marked sealed
	// (redrive.HeaderSealed). Peek shows such a body opened when the
	// DLQ's keys (SetBodies) open it; otherwise Body is the envelope as
	// the broker holds it and BodyError says why it did not open
	// ("undecryptable: ...").
	Sealed    string `json:"sealed,omitempty"`
	BodyError string `json:"body_error,omitempty"`
}

// deadLetterOf reads a DLQ delivery.
func (q *DLQ) deadLetterOf(d *amqp091.Delivery) DeadLetter {
	dl := DeadLetter{MessageID: d.MessageId, Kind: kindOf(d, ""), ContentType: d.ContentType, Body: d.Body,
		Timestamp: d.Timestamp, Origin: q.topo.Queue, Headers: d.Headers, History: []redrive.Event{}}
	if s, ok := d.Headers[HeaderOrigin].(string); ok && s != "" {
		dl.Origin = s
	}
	dl.Reason, _ = d.Headers[HeaderReason].(string)
	dl.Class, _ = d.Headers[HeaderClass].(string)
	dl.Error, _ = d.Headers[HeaderError].(string)
	dl.Cause, _ = d.Headers[HeaderCause].(string)
	if v, ok := d.Headers[HeaderDeadAt]; ok {
		if ms, err := intHeader(v, 0, 1<<53); err == nil {
			dl.DeadAt = time.UnixMilli(int64(ms))
		}
	}
	if dl.Reason == "" {
		dl.Reason, dl.DeadAt = brokerDeath(d.Headers)
	}
	st, err := readState(d.Headers, dl.Origin)
	if err != nil {
		dl.Problem = err.Error()
	} else {
		dl.Attempts, dl.Redriven, dl.History, dl.HistoryDropped = st.attempts, st.redriven, st.history, st.dropped
		if dl.History == nil {
			dl.History = []redrive.Event{}
		}
	}
	return dl
}

// brokerDeath reads the reason and time of the broker's latest
// dead-lettering from x-death.
func brokerDeath(h amqp091.Table) (string, time.Time) {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return "", time.Time{}
	}
	t, _ := deaths[0].(amqp091.Table)
	reason, _ := t["reason"].(string)
	at, _ := t["time"].(time.Time)
	return reason, at
}

// Peek returns up to n dead letters from the head of the DLQ without
// taking them: they are read unacknowledged and handed back when Peek
// closes its channel, which puts them back where they were.
func (q *DLQ) Peek(ctx context.Context, n int) ([]DeadLetter, error) {
	if n <= 0 || n > MaxPeek {
		return nil, fmt.Errorf("amqp: peek %d: want 1 to %d messages", n, MaxPeek)
	}
	ch, err := q.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []DeadLetter
	for len(out) < n && ctx.Err() == nil {
		d, ok, err := ch.Get(q.topo.DLQ(), false)
		if err != nil {
			return nil, fmt.Errorf("amqp: read dead-letter queue %q: %w", q.topo.DLQ(), err)
		}
		if !ok {
			break
		}
		dl := q.deadLetterOf(&d)
		if id, marked := d.Headers[redrive.HeaderSealed]; marked {
			dl.Sealed = fmt.Sprint(id)
			if plain, err := q.bodies.Open(dl.Origin, d.Body, true); err != nil {
				dl.BodyError = store.ReasonUndecryptable + ": " + err.Error()
			} else {
				dl.Body = plain
			}
		}
		out = append(out, dl)
	}
	return out, ctx.Err()
}

// RedriveOptions say how many dead letters to redrive, how fast.
type RedriveOptions struct {
	// Max bounds the dead letters taken from the head of the DLQ
	// (redriven or refused); 0 takes the messages in the queue when the
	// redrive starts (those dead-lettered meanwhile stay).
	Max int
	// Rate bounds the redrive, in messages per second (default 100;
	// negative, or faster than one a nanosecond: no bound; NaN is
	// refused).
	Rate float64
	// Note is recorded in the redriven event of each message's history
	// (who, why).
	Note string
	// Progress, when set, is called after each message redriven with the
	// running total.
	Progress func(redriven int)
}

// RedriveResult says what a redrive did.
type RedriveResult struct {
	// Redriven counts the messages published back to their work queue.
	Redriven int `json:"redriven"`
	// Refused counts the messages marked not reprocessable
	// (HeaderNotReprocessable); they stay in the DLQ, in order.
	Refused int `json:"refused"`
}

// Redrive moves dead letters from the head of the DLQ back to their work
// queue (HeaderOrigin, else this DLQ's work queue) with their attempt
// count reset: each is published, confirmed, with a redriven event
// appended to its history and its dead-letter headers removed, and only
// then taken from the DLQ, so a crash duplicates a message and never
// loses one. It stops at ctx's end with what it did so far.
func (q *DLQ) Redrive(ctx context.Context, o RedriveOptions) (RedriveResult, error) {
	var res RedriveResult
	if err := transport.CheckMax("amqp", o.Max); err != nil {
		return res, err
	}
	if err := transport.CheckRate("amqp", o.Rate); err != nil {
		return res, err
	}
	pace := transport.NewPacer(o.Rate)
	defer pace.Stop()
	ch, err := q.conn.Channel(ctx)
	if err != nil {
		return res, err
	}
	// Refused messages are held unacknowledged until the end, then handed
	// back in place by closing the channel.
	defer ch.Close()
	if o.Max == 0 {
		st, err := ch.QueueDeclarePassive(q.topo.DLQ(), true, false, false, false, nil)
		if err != nil {
			return res, fmt.Errorf("amqp: dead-letter queue %q: %w", q.topo.DLQ(), err)
		}
		o.Max = st.Messages
	}
	for res.Redriven+res.Refused < o.Max {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		d, ok, err := ch.Get(q.topo.DLQ(), false)
		if err != nil {
			return res, fmt.Errorf("amqp: read dead-letter queue %q: %w", q.topo.DLQ(), err)
		}
		if !ok {
			break
		}
		if b, _ := d.Headers[HeaderNotReprocessable].(bool); b {
			res.Refused++
			continue
		}
		if err := pace.Wait(ctx); err != nil {
			return res, err
		}
		if err := q.redriveOne(ctx, &d, o.Note); err != nil {
			return res, err
		}
		if err := d.Ack(false); err != nil {
			return res, fmt.Errorf("amqp: redrive: the message %s was published to its queue but could not be taken from the DLQ "+
				"(it will be there twice): %w", d.MessageId, err)
		}
		res.Redriven++
		if o.Progress != nil {
			o.Progress(res.Redriven)
		}
	}
	return res, nil
}

// redriveOne publishes a dead letter back to its work queue.
func (q *DLQ) redriveOne(ctx context.Context, d *amqp091.Delivery, note string) error {
	dl := q.deadLetterOf(d)
	now := time.Now()
	set := amqp091.Table{HeaderRedriven: int64(dl.Redriven + 1)}
	if dl.Problem == "" {
		ev := store.Event{Kind: store.EventRedriven, At: now, Note: note}
		hist, dropped := historyJSON(append(dl.History, ev), dl.HistoryDropped, DefaultMaxHistory, DefaultMaxHistoryBytes)
		set[HeaderHistory] = hist
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
	}
	msg := republish(d, set, HeaderAttempt, HeaderDue, HeaderLastDelay, HeaderReason, HeaderClass, HeaderError,
		HeaderCause, HeaderDeadAt, HeaderOrigin)
	if dl.Problem != "" {
		// Unreadable redrive headers: start afresh rather than die again.
		for _, k := range []string{HeaderHistory, HeaderHistoryDropped, HeaderMaxRetries, HeaderPolicy, HeaderDependency} {
			delete(msg.Headers, k)
		}
	}
	// The message keeps its trace context: its next attempts join the
	// trace it was first published in, and the redrive's span links to it.
	tc := traceOf(d.Headers)
	ctx, span := startRedrive(ctx, q.tracer, dl.Origin, msg.MessageId, tc)
	if tc == "" {
		InjectTrace(ctx, msg.Headers) // none to keep: its attempts join the redrive's trace
	}
	err := q.pub.Publish(ctx, "", dl.Origin, msg)
	if err != nil {
		err = fmt.Errorf("amqp: redrive message %s to %q: %w", d.MessageId, dl.Origin, err)
	}
	tracectx.EndSpan(span, err)
	return err
}

// Purge deletes every message waiting in the DLQ and returns how many.
func (q *DLQ) Purge(ctx context.Context) (int, error) {
	ch, err := q.conn.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	n, err := ch.QueuePurge(q.topo.DLQ(), false)
	if err != nil {
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return 0, fmt.Errorf("amqp: dead-letter queue %q does not exist", q.topo.DLQ())
		}
		return 0, fmt.Errorf("amqp: purge %q: %w", q.topo.DLQ(), err)
	}
	return n, nil
}
