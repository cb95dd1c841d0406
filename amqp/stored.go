package amqp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/internal/payload"
	"github.com/redrivehq/redrive/internal/transport"
)

// Kind is the job kind of a RabbitMQ message kept in a store, such as a
// dead letter a Keeper stored: its payload is a Message, and running the
// job (see RegisterKind) publishes the message to its queue. Redriving a
// dead job of this kind from the store therefore sends the message back
// to its broker queue, instead of running it in the store's worker.
const Kind = "amqp"

// The encodings of a Message's body in its JSON.
const (
	// BodyJSON: the body is compact JSON (no white space outside its
	// strings), and is the value of "body" as it is, byte for byte.
	BodyJSON = payload.JSON
	// BodyText: the body is UTF-8 text, and "body" is a JSON string of
	// it.
	BodyText = payload.Text
	// BodyBase64: the body is binary, and "body" is a JSON string of its
	// standard base64.
	BodyBase64 = payload.Base64
)

// Message is a RabbitMQ message as a job's payload: its body, kept
// byte-exact whatever it holds, its properties and its headers (but
// redrive's own, which the job's fields and history hold), and where it
// goes back to.
type Message struct {
	// Queue is the work queue the message is published to, through the
	// default exchange.
	Queue string `json:"queue"`
	// Broker says which broker the message came from (its URL without
	// credentials); informational.
	Broker string `json:"broker,omitempty"`
	// Body is the message's body. In JSON it is encoded as BodyEncoding
	// says: a JSON body as it is, text as a string, anything else as
	// base64.
	Body []byte `json:"-"`
	// BodyEncoding is BodyJSON, BodyText or BodyBase64 (set by
	// MarshalJSON; read by UnmarshalJSON).
	BodyEncoding string `json:"body_encoding"`
	// The message's properties.
	ContentType     string    `json:"content_type,omitempty"`
	ContentEncoding string    `json:"content_encoding,omitempty"`
	MessageID       string    `json:"message_id,omitempty"`
	Type            string    `json:"type,omitempty"`
	CorrelationID   string    `json:"correlation_id,omitempty"`
	ReplyTo         string    `json:"reply_to,omitempty"`
	AppID           string    `json:"app_id,omitempty"`
	Priority        uint8     `json:"priority,omitempty"`
	Timestamp       time.Time `json:"timestamp,omitzero"`
	// Headers are the message's own headers, as JSON values: AMQP
	// numbers become JSON numbers, byte arrays strings (text) or
	// base64 strings, timestamps RFC 3339 strings, tables objects.
	Headers map[string]any `json:"headers,omitempty"`
}

// messageFields is Message without its body, for JSON.
type messageFields Message

// MarshalJSON encodes the message with its body first, a JSON body kept
// byte for byte.
func (m Message) MarshalJSON() ([]byte, error) {
	f := messageFields(m)
	var body []byte
	f.BodyEncoding, body = payload.Encode(m.Body)
	rest, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("amqp: message: %w", err)
	}
	out := make([]byte, 0, len(body)+len(rest)+9)
	out = append(out, `{"body":`...)
	out = append(out, body...)
	out = append(out, ',')
	return append(out, rest[1:]...), nil
}

// UnmarshalJSON decodes a message, its body as BodyEncoding says.
func (m *Message) UnmarshalJSON(b []byte) error {
	var in struct {
		messageFields
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*m = Message(in.messageFields)
	if m.Queue == "" {
		return errors.New(`amqp: message: "queue" is required`)
	}
	body, err := payload.Decode("body", "body_encoding", m.BodyEncoding, in.Body)
	if err != nil {
		return fmt.Errorf("amqp: message: %w", err)
	}
	m.Body = body
	if m.BodyEncoding == "" {
		m.BodyEncoding = BodyText
	}
	return nil
}

// messageOf returns the message a delivery carries, bound for queue,
// without redrive's headers and the broker's dead-lettering ones.
func messageOf(d *amqp091.Delivery, queue, broker string) Message {
	m := Message{Queue: queue, Broker: broker, Body: d.Body, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		MessageID: d.MessageId, Type: d.Type, CorrelationID: d.CorrelationId, ReplyTo: d.ReplyTo, AppID: d.AppId,
		Priority: d.Priority, Timestamp: d.Timestamp}
	for k, v := range d.Headers {
		if strings.HasPrefix(k, "x-redrive-") || strings.HasPrefix(k, "x-death") || strings.HasPrefix(k, "x-first-death-") ||
			strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]any{}
		}
		m.Headers[k] = jsonValue(v)
	}
	return m
}

// jsonValue converts an AMQP field value to a JSON value.
func jsonValue(v any) any {
	switch x := v.(type) {
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp091.Table:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case amqp091.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
	}
	return v
}

// amqpValue converts a JSON value (as encoding/json decodes it) to an
// AMQP field value: whole numbers become 64-bit integers.
func amqpValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := amqp091.Table{}
		for k, e := range x {
			out[k] = amqpValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = amqpValue(e)
		}
		return out
	}
	return v
}

// publishing returns the message as a persistent publishing, its headers
// and then set.
func (m *Message) publishing(set amqp091.Table) amqp091.Publishing {
	h := amqp091.Table{}
	for k, v := range m.Headers {
		h[k] = amqpValue(v)
	}
	for k, v := range set {
		h[k] = v
	}
	id := m.MessageID
	if id == "" {
		id = newMessageID()
	}
	return amqp091.Publishing{Headers: h, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		DeliveryMode: amqp091.Persistent, Priority: m.Priority, CorrelationId: m.CorrelationID, ReplyTo: m.ReplyTo,
		MessageId: id, Timestamp: m.Timestamp, Type: m.Type, AppId: m.AppID, Body: m.Body}
}

// KindOptions configure the handler of Kind.
type KindOptions struct {
	// Get reads a job with its history, e.g. redrive.Client.Get: a
	// worker fetches jobs without their history, which the message
	// carries back to its queue. Without it, a job with no history in
	// hand is published without one.
	Get func(ctx context.Context, id int64) (*redrive.Job, error)
	// Timeout bounds one publish, retries included (default 30s).
	Timeout time.Duration
	// MaxHistory and MaxHistoryBytes bound the history the message
	// carries (defaults DefaultMaxHistory, DefaultMaxHistoryBytes).
	MaxHistory      int
	MaxHistoryBytes int
	// Queues are the queues a job of Kind may publish to: a job naming
	// another fails, Permanent, and is refused at enqueue. Empty: any
	// queue (redrive serve allows its managed queues only, so that the
	// API cannot publish anywhere on the broker).
	Queues []string
	// Bodies, when it seals the message's queue, seals a body that is
	// not marked sealed (one a Keeper stored in clear because the store
	// seals the whole message) before it is published. A body marked
	// sealed is published as it is.
	Bodies *redrive.SealedBodies
}

// validate checks a payload of Kind: a Message bound for an allowed
// queue.
func (o *KindOptions) validate(payload json.RawMessage) error {
	return transport.Validate(payload, func(m *Message) string { return m.Queue },
		transport.Destinations{Allowed: o.Queues, Field: "payload.queue", Noun: "queue", Verb: "publishes to"})
}

// RegisterKind registers with r (a redrive.Worker or Executor) the
// handler of Kind: it publishes the job's Message, confirmed, to its
// queue through pub, with the job's history and redrive count in its
// headers and no attempt count, so that the queue's consumers and its
// Router start it afresh; then it records the publish (redrive.Record).
// A payload that is not a Message, or names a queue outside
// opts.Queues, is a Permanent failure; a queue that does not exist (the
// broker returns the message) too; anything else (broker unreachable,
// publish not confirmed) is Transient, retried by the job's policy. When
// r is a redrive.Worker, its client also refuses such payloads at
// enqueue (Client.SetValidator).
func RegisterKind(r redrive.Registrar, pub *Publisher, opts KindOptions) {
	transport.Defaults(&opts.Timeout, &opts.MaxHistory, &opts.MaxHistoryBytes, DefaultMaxHistory, DefaultMaxHistoryBytes)
	transport.RegisterKind(r, Kind, opts.validate, func(ctx context.Context, j *redrive.Job) error {
		var m Message
		if err := json.Unmarshal(j.Payload, &m); err != nil {
			return &failure.Error{Class: failure.Permanent, Reason: failure.ReasonUndecodablePayload,
				Err: fmt.Errorf("the payload is not an AMQP message: %w", err)}
		}
		if err := opts.validate(j.Payload); err != nil {
			return &failure.Error{Class: failure.Permanent, Reason: "amqp_queue_not_allowed", Err: err}
		}
		events, err := carry.JobHistory(ctx, j, opts.Get)
		if err != nil {
			return err
		}
		hist, dropped := historyJSON(events, 0, opts.MaxHistory, opts.MaxHistoryBytes)
		set := amqp091.Table{HeaderHistory: hist, HeaderRedriven: int64(j.Redriven)}
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
		if !j.Reprocessable {
			set[HeaderNotReprocessable] = true
		}
		pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		// A queue that does not exist is not waited for: the job's
		// policy is the retry, and an unroutable message is permanent.
		msg := m.publishing(set)
		if _, marked := msg.Headers[redrive.HeaderSealed]; !marked {
			if err := sealBody(opts.Bodies, m.Queue, &msg); err != nil {
				return err
			}
		}
		if traceOf(msg.Headers) == "" {
			// No trace of its own (none, or a malformed one, dropped
			// with its tracestate): its attempts join this one's.
			InjectTrace(ctx, msg.Headers)
		}
		if err := pub.publishNoRoute(pctx, "", m.Queue, msg); err != nil {
			var ret *ReturnedError
			if errors.As(err, &ret) {
				return &failure.Error{Class: failure.Permanent, Reason: "amqp_unroutable",
					Err: fmt.Errorf("queue %q does not exist on the broker: %w", m.Queue, err)}
			}
			return &failure.Error{Class: failure.Transient, Reason: "amqp_publish",
				Err: fmt.Errorf("publish to queue %q: %w", m.Queue, err)}
		}
		redrive.Record(ctx, "published", fmt.Sprintf("published to queue %s (%d bytes, %s)", m.Queue, len(m.Body), m.BodyEncoding))
		return nil
	})
}
