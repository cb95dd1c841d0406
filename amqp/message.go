package amqp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/store"
)

// The headers redrive reads and writes. Numbers are integers; times are
// Unix milliseconds; the history is a JSON array of redrive.Event.
const (
	// HeaderAttempt is the number of attempts a message has used: absent
	// or 0 for a new one. It is authoritative; when it is absent, the
	// rejections the broker counted in x-death stand in for it.
	HeaderAttempt = "x-redrive-attempt"
	// HeaderDue is when a retried or deferred message is due.
	HeaderDue = "x-redrive-due"
	// HeaderLastDelay is the delay (ms) the retry policy chose last time,
	// from which decorrelated jitter draws the next one.
	HeaderLastDelay = "x-redrive-last-delay"
	// HeaderHistory is the message's attempt history, oldest first,
	// bounded (see ConsumerOptions.MaxHistory).
	HeaderHistory = "x-redrive-history"
	// HeaderHistoryDropped counts the oldest events dropped to bound the
	// history.
	HeaderHistoryDropped = "x-redrive-history-dropped"
	// HeaderMaxRetries, when set, overrides the policy's retry count for
	// the message.
	HeaderMaxRetries = "x-redrive-max-retries"
	// HeaderDependency names the circuit breaker guarding the message's
	// dependency.
	HeaderDependency = "x-redrive-dependency"
	// HeaderRedriven counts the redrives of the message from its DLQ.
	HeaderRedriven = "x-redrive-redriven"
	// HeaderKind is the job kind when the message's type property is
	// taken by something else.
	HeaderKind = "x-redrive-kind"

	// HeaderReason is a dead letter's reason: retries_exhausted,
	// permanent, needs_auth or undecodable.
	HeaderReason = "x-redrive-reason"
	// HeaderClass is the failure class of a dead letter's last error.
	HeaderClass = "x-redrive-class"
	// HeaderError is a dead letter's last error message.
	HeaderError = "x-redrive-error"
	// HeaderCause is the machine-readable cause of the last error, e.g.
	// http_404 or undecodable_payload.
	HeaderCause = "x-redrive-cause"
	// HeaderDeadAt is when the message was dead-lettered.
	HeaderDeadAt = "x-redrive-dead-at"
	// HeaderOrigin is the work queue a dead letter came from; a redrive
	// publishes it back there.
	HeaderOrigin = "x-redrive-queue"
)

// Bounds of a message's history, by default.
const (
	DefaultMaxHistory      = 50
	DefaultMaxHistoryBytes = 16 << 10
)

// state is what redrive's headers say about a delivered message.
type state struct {
	attempts   int // used so far
	due        time.Time
	lastDelay  time.Duration
	history    []store.Event
	dropped    int
	maxRetries int // -1: the policy's
	dependency string
	redriven   int
	policy     json.RawMessage
	noRedrive  bool
}

// errUndecodable marks a message whose redrive headers cannot be read.
var errUndecodable = errors.New("undecodable message")

// readState decodes redrive's headers of a delivery from queue. A header
// of the wrong type or an unreadable history is an error wrapping
// errUndecodable.
func readState(h amqp091.Table, queue string) (state, error) {
	st := state{maxRetries: -1}
	bad := func(name string, e error) error {
		return fmt.Errorf("%w: header %s: %v", errUndecodable, name, e)
	}
	if _, ok := h[HeaderAttempt]; !ok {
		st.attempts = deathCount(h, queue)
	}
	const maxMillis = math.MaxInt64 / int64(time.Millisecond)
	var due, lastDelay int
	for _, f := range []struct {
		name string
		dst  *int
		hi   int64
	}{
		{HeaderAttempt, &st.attempts, 1 << 30}, {HeaderMaxRetries, &st.maxRetries, 1 << 20},
		{HeaderRedriven, &st.redriven, 1 << 30}, {HeaderHistoryDropped, &st.dropped, 1 << 30},
		{HeaderDue, &due, maxMillis}, {HeaderLastDelay, &lastDelay, maxMillis},
	} {
		if v, ok := h[f.name]; ok {
			n, err := intHeader(v, 0, f.hi)
			if err != nil {
				return st, bad(f.name, err)
			}
			*f.dst = n
		}
	}
	if due > 0 {
		st.due = time.UnixMilli(int64(due))
	}
	st.lastDelay = time.Duration(lastDelay) * time.Millisecond
	if v, ok := h[HeaderDependency]; ok {
		s, ok := v.(string)
		if !ok {
			return st, bad(HeaderDependency, fmt.Errorf("want a string, got %T", v))
		}
		st.dependency = s
	}
	if v, ok := h[HeaderPolicy]; ok {
		s, ok := v.(string)
		if !ok || !json.Valid([]byte(s)) {
			return st, bad(HeaderPolicy, fmt.Errorf("want the JSON of a retry policy, got %T", v))
		}
		st.policy = json.RawMessage(s)
	}
	if v, ok := h[HeaderNotReprocessable]; ok {
		b, ok := v.(bool)
		if !ok {
			return st, bad(HeaderNotReprocessable, fmt.Errorf("want a boolean, got %T", v))
		}
		st.noRedrive = b
	}
	if v, ok := h[HeaderHistory]; ok {
		var raw []byte
		switch x := v.(type) {
		case string:
			raw = []byte(x)
		case []byte:
			raw = x
		default:
			return st, bad(HeaderHistory, fmt.Errorf("want JSON text, got %T", v))
		}
		if err := json.Unmarshal(raw, &st.history); err != nil {
			return st, bad(HeaderHistory, err)
		}
	}
	return st, nil
}

// intHeader reads an integer header that a client in any language may
// have sent as any AMQP number type, or as decimal text.
func intHeader(v any, lo, hi int64) (int, error) {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case float32:
		if x != float32(math.Trunc(float64(x))) {
			return 0, fmt.Errorf("want an integer, got %v", x)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<62 {
			return 0, fmt.Errorf("want an integer, got %v", x)
		}
		n = int64(x)
	case string:
		p, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %q", x)
		}
		n = p
	default:
		return 0, fmt.Errorf("want an integer, got %T", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
	}
	return int(n), nil
}

// deathCount is how many times the broker saw the message rejected (or
// over its delivery limit) in queue, from the x-death header.
func deathCount(h amqp091.Table, queue string) int {
	deaths, ok := h["x-death"].([]any)
	if !ok {
		return 0
	}
	n := 0
	for _, d := range deaths {
		t, ok := d.(amqp091.Table)
		if !ok {
			continue
		}
		if q, _ := t["queue"].(string); q != queue {
			continue
		}
		switch r, _ := t["reason"].(string); r {
		case "rejected", "delivery_limit":
			c, err := intHeader(t["count"], 0, 1<<30)
			if err == nil {
				n += c
			}
		}
	}
	return n
}

// historyJSON encodes the history a message carries (see carry.History).
func historyJSON(events []store.Event, dropped, max, maxBytes int) (string, int) {
	return carry.History(events, dropped, max, maxBytes)
}

// newMessageID returns a random message id for a message published
// without an idempotency key.
func newMessageID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kindOf returns a delivery's job kind: its type property, else its
// HeaderKind header, else def.
func kindOf(d *amqp091.Delivery, def string) string {
	if d.Type != "" {
		return d.Type
	}
	if k, ok := d.Headers[HeaderKind].(string); ok && k != "" {
		return k
	}
	return def
}

// jobOf builds the job a handler sees for a delivery.
func jobOf(d *amqp091.Delivery, queue, kind string, st state, now time.Time) *redrive.Job {
	created := d.Timestamp
	if created.IsZero() {
		created = now
	}
	due := st.due
	if due.IsZero() {
		due = created
	}
	return &redrive.Job{Queue: queue, Kind: kind, Payload: d.Body, State: redrive.Running, Attempt: st.attempts + 1,
		MaxRetries: st.maxRetries, Policy: st.policy, IdempotencyKey: d.MessageId, Dependency: st.dependency,
		Reprocessable: !st.noRedrive,
		CreatedAt:     created, RunAt: due, RetryCount: st.attempts, Redriven: st.redriven,
		LastDelay: store.Duration(st.lastDelay), History: st.history, Trace: traceOf(d.Headers)}
}

// republish returns the publishing that carries a delivered message on:
// its body and properties, its headers but the broker's x-death bookkeeping
// and the headers in drop, then set. A message without a message-id gets
// one.
func republish(d *amqp091.Delivery, set amqp091.Table, drop ...string) amqp091.Publishing {
	h := amqp091.Table{}
	for k, v := range d.Headers {
		switch k {
		case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason":
			continue
		}
		h[k] = v
	}
	for _, k := range drop {
		delete(h, k)
	}
	for k, v := range set {
		h[k] = v
	}
	id := d.MessageId
	if id == "" {
		id = newMessageID()
	}
	mode := d.DeliveryMode
	if mode == 0 {
		mode = amqp091.Persistent
	}
	return amqp091.Publishing{Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: mode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		Expiration: "", MessageId: id, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body}
}

// deadHeaders are the headers of a dead letter: why it died, and where
// from.
func deadHeaders(o *redrive.Outcome, queue string, attempts int) amqp091.Table {
	h := amqp091.Table{HeaderReason: o.DeadReason, HeaderClass: o.ClassName(), HeaderError: validText(o.Error),
		HeaderDeadAt: o.At.UnixMilli(), HeaderOrigin: queue, HeaderAttempt: int64(attempts)}
	if o.Event != nil && o.Event.Reason != "" {
		h[HeaderCause] = o.Event.Reason
	}
	return h
}

// validText makes s valid UTF-8, as AMQP's long strings must be for most
// clients.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
