package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// The headers redrive reads and writes on records. Values are text:
// integers in decimal, times in Unix milliseconds, the history a JSON
// array of redrive.Event.
const (
	// HeaderKind is the record's job kind (absent: the topic's
	// DefaultKind).
	HeaderKind = "x-redrive-kind"
	// HeaderAttempt is the number of attempts the record has used:
	// absent or 0 for a new one.
	HeaderAttempt = "x-redrive-attempt"
	// HeaderDue is when a retried record is due.
	HeaderDue = "x-redrive-due"
	// HeaderLastDelay is the delay (ms) the policy chose last time.
	HeaderLastDelay = "x-redrive-last-delay"
	// HeaderFirstFailure is when the record first failed.
	HeaderFirstFailure = "x-redrive-first-failure"
	// HeaderHistory is the attempt history, oldest first, bounded.
	HeaderHistory = "x-redrive-history"
	// HeaderHistoryDropped counts the oldest events dropped to bound it.
	HeaderHistoryDropped = "x-redrive-history-dropped"
	// HeaderOriginTopic, HeaderOriginPartition and HeaderOriginOffset
	// say where the record was first consumed: its identity through its
	// retries (the job's idempotency key is topic/partition/offset).
	HeaderOriginTopic     = "x-redrive-origin-topic"
	HeaderOriginPartition = "x-redrive-origin-partition"
	HeaderOriginOffset    = "x-redrive-origin-offset"
	// HeaderRedriven counts the record's redrives from the DLT.
	HeaderRedriven = "x-redrive-redriven"
	// HeaderReason, HeaderClass, HeaderError, HeaderCause and
	// HeaderDeadAt say why and when a dead letter died.
	HeaderReason = "x-redrive-reason"
	HeaderClass  = "x-redrive-class"
	HeaderError  = "x-redrive-error"
	HeaderCause  = "x-redrive-cause"
	HeaderDeadAt = "x-redrive-dead-at"
)

// Bounds of a record's history, by default.
const (
	DefaultMaxHistory      = 50
	DefaultMaxHistoryBytes = 16 << 10
)

// errUndecodable marks a record whose redrive headers cannot be read.
var errUndecodable = errors.New("undecodable record")

// state is what redrive's headers say about a record.
type state struct {
	attempts     int
	due          time.Time
	lastDelay    time.Duration
	firstFailure time.Time
	history      []store.Event
	dropped      int
	redriven     int
	kind         string
	originTopic  string
	originPart   int32
	originOffset int64
	hasOrigin    bool
}

// header returns the value of the last header named k.
func header(r *kgo.Record, k string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == k {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

// readState decodes redrive's headers of r; a header that cannot be read
// is an error wrapping errUndecodable.
func readState(r *kgo.Record) (state, error) {
	var st state
	bad := func(name string, e error) error { return fmt.Errorf("%w: header %s: %v", errUndecodable, name, e) }
	num := func(name string, lo, hi int64) (int64, bool, error) {
		v, ok := header(r, name)
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return 0, true, bad(name, fmt.Errorf("want an integer from %d to %d, got %q", lo, hi, v))
		}
		return n, true, nil
	}
	const maxMillis = 1 << 50
	var err error
	var n int64
	var ok bool
	if n, _, err = num(HeaderAttempt, 0, 1<<30); err != nil {
		return st, err
	}
	st.attempts = int(n)
	if n, _, err = num(HeaderRedriven, 0, 1<<30); err != nil {
		return st, err
	}
	st.redriven = int(n)
	if n, _, err = num(HeaderHistoryDropped, 0, 1<<30); err != nil {
		return st, err
	}
	st.dropped = int(n)
	if n, ok, err = num(HeaderDue, 0, maxMillis); err != nil {
		return st, err
	} else if ok {
		st.due = time.UnixMilli(n)
	}
	if n, ok, err = num(HeaderFirstFailure, 0, maxMillis); err != nil {
		return st, err
	} else if ok {
		st.firstFailure = time.UnixMilli(n)
	}
	if n, _, err = num(HeaderLastDelay, 0, maxMillis); err != nil {
		return st, err
	}
	st.lastDelay = time.Duration(n) * time.Millisecond
	st.kind, _ = header(r, HeaderKind)
	if v, ok := header(r, HeaderHistory); ok {
		if err := json.Unmarshal([]byte(v), &st.history); err != nil {
			return st, bad(HeaderHistory, err)
		}
	}
	if t, ok := header(r, HeaderOriginTopic); ok {
		p, _, err := num(HeaderOriginPartition, 0, 1<<31-1)
		if err != nil {
			return st, err
		}
		o, _, err := num(HeaderOriginOffset, 0, 1<<62)
		if err != nil {
			return st, err
		}
		st.originTopic, st.originPart, st.originOffset, st.hasOrigin = t, int32(p), o, true
	}
	return st, nil
}

// readOrigin reads the origin headers of r alone, for a record whose
// other redrive headers may not be readable.
func readOrigin(r *kgo.Record) (topic string, partition int32, offset int64, ok bool) {
	t, ok := header(r, HeaderOriginTopic)
	if !ok || t == "" {
		return "", 0, 0, false
	}
	ps, _ := header(r, HeaderOriginPartition)
	os, _ := header(r, HeaderOriginOffset)
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return "", 0, 0, false
	}
	return t, int32(p), o, true
}

// identity returns the record's identity: where it was first consumed.
func (st *state) identity(r *kgo.Record) (string, int32, int64) {
	if st.hasOrigin {
		return st.originTopic, st.originPart, st.originOffset
	}
	return r.Topic, r.Partition, r.Offset
}

// key returns the job's idempotency key: topic/partition/offset of the
// record's first consumption.
func (st *state) key(r *kgo.Record) string {
	t, p, o := st.identity(r)
	// One allocation, not fmt's three: it is built for every record.
	var b strings.Builder
	b.Grow(len(t) + 2 + 10 + 19)
	b.WriteString(t)
	b.WriteByte('/')
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(p), 10))
	b.WriteByte('/')
	b.Write(strconv.AppendInt(num[:0], o, 10))
	return b.String()
}

// jobOf builds the job a handler sees for record r of main topic topic.
func jobOf(r *kgo.Record, topic, kind string, st state, now time.Time) *redrive.Job {
	created := r.Timestamp
	if !st.firstFailure.IsZero() {
		created = st.firstFailure
	}
	if created.IsZero() {
		created = now
	}
	due := st.due
	if due.IsZero() {
		due = r.Timestamp
	}
	if st.kind != "" {
		kind = st.kind
	}
	return &redrive.Job{Queue: topic, Kind: kind, Payload: r.Value, State: redrive.Running, Attempt: st.attempts + 1,
		MaxRetries: -1, IdempotencyKey: st.key(r), Reprocessable: true, CreatedAt: created, RunAt: due,
		RetryCount: st.attempts, Redriven: st.redriven, LastDelay: store.Duration(st.lastDelay), History: st.history,
		Trace: traceOf(r)}
}

// forwarded returns a copy of r bound for topic, with its key, value and
// headers but those named in set (replaced) and in drop (removed).
func forwarded(r *kgo.Record, topic string, set map[string]string, drop ...string) *kgo.Record {
	out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if _, replaced := set[h.Key]; replaced {
			continue
		}
		skip := false
		for _, d := range drop {
			if h.Key == d {
				skip = true
				break
			}
		}
		if !skip {
			out.Headers = append(out.Headers, h)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: []byte(set[k])})
	}
	return out
}

// SealRecord seals the value of rec, a job's record for its main topic
// rec.Topic, when bodies seals that topic's: the value becomes the
// envelope a store keeps a sealed payload in, bound to the topic's name,
// and the record is marked with the header redrive.HeaderSealed (the key
// id). A Consumer whose ConsumerOptions.Bodies holds the key opens it
// before the handler sees it. A record already marked, or of a topic
// bodies does not seal, is left as it is. Seal once, when the record is
// made: retry tiers, the DLT and redrives carry the value as it is.
func SealRecord(rec *kgo.Record, bodies *redrive.SealedBodies) error {
	if _, marked := header(rec, redrive.HeaderSealed); marked {
		return nil
	}
	out, id, err := bodies.Seal(rec.Topic, rec.Value)
	if err != nil {
		return fmt.Errorf("kafka: seal the value: %w", err)
	}
	if id != "" {
		rec.Value = out
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: redrive.HeaderSealed, Value: []byte(id)})
	}
	return nil
}

// NewRecord returns a record of job kind for topic: value is the payload
// (JSON-encoded unless it is already []byte or json.RawMessage), key the
// record's key (nil: none), and the kind in HeaderKind. Produce it with
// any kgo.Client.
func NewRecord(topic, kind string, payload any, key []byte) (*kgo.Record, error) {
	var value []byte
	switch p := payload.(type) {
	case []byte:
		value = p
	case json.RawMessage:
		value = p
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, fmt.Errorf("kafka: encode payload: %w", err)
		}
		value = b
	}
	return &kgo.Record{Topic: topic, Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: HeaderKind, Value: []byte(kind)}}}, nil
}
