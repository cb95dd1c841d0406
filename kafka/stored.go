package kafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/internal/payload"
	"github.com/redrivehq/redrive/internal/transport"
)

// Kind is the job kind of a Kafka record kept in a store, such as a dead
// letter a Keeper stored: its payload is a Record, and running the job
// (see RegisterKind) produces the record to its main topic. Redriving a
// dead job of this kind from the store therefore sends the record back
// to its topic, where its consumers run it afresh, instead of running it
// in the store's worker.
const Kind = "kafka"

// The encodings of a Record's key, value and header values in its JSON.
const (
	// EncodingJSON: the bytes are compact JSON (no white space outside
	// its strings), kept as the JSON value itself, byte for byte.
	EncodingJSON = payload.JSON
	// EncodingText: the bytes are UTF-8 text, kept as a JSON string.
	EncodingText = payload.Text
	// EncodingBase64: the bytes are binary, kept as a JSON string of
	// their standard base64.
	EncodingBase64 = payload.Base64
)

// Record is a Kafka record as a job's payload: its key, value and
// headers, each kept byte-exact whatever it holds (but redrive's own
// x-redrive-* state headers, which the job's fields and history hold),
// and the main topic it goes back to.
//
// In JSON, the key, the value and each header's value are encoded as
// their encoding field says (EncodingJSON, EncodingText or
// EncodingBase64, chosen by MarshalJSON as the most readable one that
// keeps the bytes): {"topic": "scans", "key": "doc-7", "key_encoding":
// "text", "value": {"doc": 7}, "value_encoding": "json", "headers":
// [{"key": "tenant", "value": "acme", "value_encoding": "text"}]}. An
// absent (or null) key or value is a record without one (a null key, a
// tombstone), which is not the same as an empty one.
type Record struct {
	// Topic is the main topic the record is produced to.
	Topic string
	// Key and Value are the record's; nil is no key (no value), which
	// Kafka tells from an empty one.
	Key   []byte
	Value []byte
	// KeyEncoding and ValueEncoding are the encodings of Key and Value
	// in JSON (set by MarshalJSON; read by UnmarshalJSON; empty when the
	// key or the value is nil).
	KeyEncoding   string
	ValueEncoding string
	// Headers are the record's headers in their order, duplicates
	// included, without redrive's state headers (HeaderKind stays: it is
	// the job kind its consumers run).
	Headers []Header
	// Origin says where the record was first consumed,
	// topic/partition/offset: its identity through its retries. Running
	// the job carries it on (HeaderOriginTopic...), as DLT.Redrive does.
	Origin string
	// DeadLetter says where the Keeper read the record:
	// topic/partition/offset of the dead-letter topic. Informational.
	DeadLetter string
}

// Header is one header of a Record.
type Header struct {
	// Key is the header's name. In JSON it is a string, or base64 with
	// "key_encoding": "base64" when it is not valid UTF-8.
	Key string
	// Value is the header's value; nil is a null value.
	Value []byte
	// ValueEncoding is the encoding of Value in JSON (set by
	// MarshalJSON; empty when Value is nil).
	ValueEncoding string
}

// recordJSON is a Record's JSON.
type recordJSON struct {
	Topic         string          `json:"topic"`
	Key           json.RawMessage `json:"key,omitempty"`
	KeyEncoding   string          `json:"key_encoding,omitempty"`
	Value         json.RawMessage `json:"value,omitempty"`
	ValueEncoding string          `json:"value_encoding,omitempty"`
	Headers       []headerJSON    `json:"headers,omitempty"`
	Origin        string          `json:"origin,omitempty"`
	DeadLetter    string          `json:"dead_letter,omitempty"`
}

// headerJSON is a Header's JSON.
type headerJSON struct {
	Key           string          `json:"key"`
	KeyEncoding   string          `json:"key_encoding,omitempty"`
	Value         json.RawMessage `json:"value,omitempty"`
	ValueEncoding string          `json:"value_encoding,omitempty"`
}

// encodeBytes returns the JSON of b and its encoding; nil is absent.
func encodeBytes(b []byte) (json.RawMessage, string) {
	if b == nil {
		return nil, ""
	}
	enc, v := payload.Encode(b)
	return v, enc
}

// decodeBytes returns the bytes of a JSON value in encoding enc; an
// absent value, or null in any encoding but JSON, is nil.
func decodeBytes(field, encField, enc string, v json.RawMessage) ([]byte, error) {
	if len(v) == 0 || (string(v) == "null" && enc != EncodingJSON) {
		return nil, nil
	}
	b, err := payload.Decode(field, encField, enc, v)
	if err != nil {
		return nil, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// MarshalJSON encodes the record, its key, value and header values each
// in the encoding that fits it; a JSON value is kept byte for byte.
func (r Record) MarshalJSON() ([]byte, error) {
	out := recordJSON{Topic: r.Topic, Origin: r.Origin, DeadLetter: r.DeadLetter}
	out.Key, out.KeyEncoding = encodeBytes(r.Key)
	out.Value, out.ValueEncoding = encodeBytes(r.Value)
	for _, h := range r.Headers {
		hj := headerJSON{Key: h.Key}
		if !utf8.ValidString(h.Key) {
			hj.Key, hj.KeyEncoding = base64.StdEncoding.EncodeToString([]byte(h.Key)), EncodingBase64
		}
		hj.Value, hj.ValueEncoding = encodeBytes(h.Value)
		out.Headers = append(out.Headers, hj)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("kafka: record: %w", err)
	}
	return b, nil
}

// UnmarshalJSON decodes a record, its key, value and header values as
// their encodings say. The topic is required.
func (r *Record) UnmarshalJSON(b []byte) error {
	var in recordJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.Topic == "" {
		return errors.New(`kafka: record: "topic" is required`)
	}
	out := Record{Topic: in.Topic, Origin: in.Origin, DeadLetter: in.DeadLetter}
	var err error
	if out.Key, err = decodeBytes("key", "key_encoding", in.KeyEncoding, in.Key); err != nil {
		return fmt.Errorf("kafka: record: %w", err)
	}
	if out.Value, err = decodeBytes("value", "value_encoding", in.ValueEncoding, in.Value); err != nil {
		return fmt.Errorf("kafka: record: %w", err)
	}
	out.KeyEncoding, out.ValueEncoding = encodingOf(out.Key, in.KeyEncoding), encodingOf(out.Value, in.ValueEncoding)
	for i, hj := range in.Headers {
		h := Header{Key: hj.Key}
		switch hj.KeyEncoding {
		case "", EncodingText:
		case EncodingBase64:
			k, err := base64.StdEncoding.DecodeString(hj.Key)
			if err != nil {
				return fmt.Errorf("kafka: record: header %d: \"key\" is not base64: %w", i, err)
			}
			h.Key = string(k)
		default:
			return fmt.Errorf("kafka: record: header %d: key_encoding %q: want text or base64", i, hj.KeyEncoding)
		}
		if h.Value, err = decodeBytes("value", "value_encoding", hj.ValueEncoding, hj.Value); err != nil {
			return fmt.Errorf("kafka: record: header %d (%s): %w", i, clip(h.Key), err)
		}
		h.ValueEncoding = encodingOf(h.Value, hj.ValueEncoding)
		out.Headers = append(out.Headers, h)
	}
	*r = out
	return nil
}

// encodingOf is the encoding a decoded value was read in: none for nil,
// text when unsaid.
func encodingOf(b []byte, enc string) string {
	switch {
	case b == nil:
		return ""
	case enc == "":
		return EncodingText
	}
	return enc
}

// clip shortens a name quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}

// stateHeader reports whether k is one of redrive's state headers: every
// x-redrive-* header but HeaderKind, which is the record's job kind.
func stateHeader(k string) bool {
	return strings.HasPrefix(k, "x-redrive-") && k != HeaderKind
}

// recordOf returns the Record a dead letter of main topic topic holds:
// its key, value and headers but redrive's state headers.
func recordOf(r *kgo.Record, topic string, st *state) Record {
	out := Record{Topic: topic, Key: r.Key, Value: r.Value,
		DeadLetter: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)}
	out.KeyEncoding, _ = payload.Encode(r.Key)
	out.ValueEncoding, _ = payload.Encode(r.Value)
	out.KeyEncoding, out.ValueEncoding = encodingOf(r.Key, out.KeyEncoding), encodingOf(r.Value, out.ValueEncoding)
	if st != nil && st.hasOrigin {
		out.Origin = fmt.Sprintf("%s/%d/%d", st.originTopic, st.originPart, st.originOffset)
	}
	for _, h := range r.Headers {
		if stateHeader(h.Key) {
			continue
		}
		hv := Header{Key: h.Key, Value: h.Value}
		if h.Value != nil {
			hv.ValueEncoding, _ = payload.Encode(h.Value)
		}
		out.Headers = append(out.Headers, hv)
	}
	return out
}

// parseOrigin reads topic/partition/offset.
func parseOrigin(s string) (topic string, partition int32, offset int64, ok bool) {
	rest, off, found := cutLast(s, "/")
	if !found {
		return "", 0, 0, false
	}
	topic, part, found := cutLast(rest, "/")
	if !found || topic == "" {
		return "", 0, 0, false
	}
	p, err1 := strconv.ParseInt(part, 10, 32)
	o, err2 := strconv.ParseInt(off, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return "", 0, 0, false
	}
	return topic, int32(p), o, true
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// produced returns the kgo record that running a job of Kind produces:
// the Record's key, value and headers (but any state header), its
// origin, then set.
func (r *Record) produced(set map[string]string) *kgo.Record {
	out := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if stateHeader(h.Key) {
			continue
		}
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if t, p, o, ok := parseOrigin(r.Origin); ok {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderOriginTopic, Value: []byte(t)},
			kgo.RecordHeader{Key: HeaderOriginPartition, Value: []byte(strconv.Itoa(int(p)))},
			kgo.RecordHeader{Key: HeaderOriginOffset, Value: []byte(strconv.FormatInt(o, 10))})
	}
	for _, k := range []string{HeaderHistory, HeaderHistoryDropped, HeaderRedriven} {
		if v, ok := set[k]; ok {
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	return out
}

// Producer is what RegisterKind produces records with: a *kgo.Client
// (its ProduceSync), or a function that produces one record and returns
// once the brokers acknowledged it.
type Producer interface {
	func(context.Context, *kgo.Record) error | *kgo.Client
}

// KindOptions configure the handler of Kind.
type KindOptions struct {
	// Get reads a job with its history, e.g. redrive.Client.Get: a
	// worker fetches jobs without their history, which the record
	// carries back to its topic. Without it, a job with no history in
	// hand is produced without one.
	Get func(ctx context.Context, id int64) (*redrive.Job, error)
	// Timeout bounds one produce, retries included (default 30s).
	Timeout time.Duration
	// MaxHistory and MaxHistoryBytes bound the history the record
	// carries (defaults DefaultMaxHistory, DefaultMaxHistoryBytes).
	MaxHistory      int
	MaxHistoryBytes int
	// Topics are the topics a job of Kind may produce to: a job naming
	// another fails, Permanent, and is refused at enqueue. Empty: any
	// topic (redrive serve allows its --kafka-topics only, so that the
	// API cannot produce anywhere on the cluster).
	Topics []string
	// Bodies, when it seals the record's topic, seals a value that is
	// not marked sealed (one a Keeper stored in clear because the store
	// seals the whole record) before it is produced. A value marked
	// sealed is produced as it is.
	Bodies *redrive.SealedBodies
}

// validate checks a payload of Kind: a Record bound for an allowed
// topic.
func (o *KindOptions) validate(raw json.RawMessage) error {
	return transport.Validate(raw, func(r *Record) string { return r.Topic },
		transport.Destinations{Allowed: o.Topics, Field: "payload.topic", Noun: "topic", Verb: "produces to"})
}

// RegisterKind registers with r (a redrive.Worker or Executor) the
// handler of Kind: it produces the job's Record to its topic through
// produce (a *kgo.Client, or a function producing one record,
// acknowledged), with its key, value and headers byte-exact, no attempt
// count, HeaderRedriven the job's redrive count and HeaderHistory the
// job's history (read with opts.Get when the job in hand has none), so
// that the topic's consumers run it afresh and its history shows every
// life; then it records the produce (redrive.Record, reason "produced").
//
// A payload that is not a Record, or names a topic outside opts.Topics,
// is a Permanent failure; so is a topic the cluster does not have, or a
// record too large for it; an authorization failure is NeedsAuth;
// anything else (brokers unreachable, not acknowledged in time) is
// Transient, retried by the job's policy. When r is a redrive.Worker,
// its client also refuses such payloads at enqueue
// (Client.SetValidator). A nil producer panics.
func RegisterKind[P Producer](r redrive.Registrar, produce P, opts KindOptions) {
	var send func(ctx context.Context, rec *kgo.Record) error
	switch p := any(produce).(type) {
	case *kgo.Client:
		if p == nil {
			panic("kafka: RegisterKind: nil *kgo.Client")
		}
		send = func(ctx context.Context, rec *kgo.Record) error { return p.ProduceSync(ctx, rec).FirstErr() }
	case func(context.Context, *kgo.Record) error:
		if p == nil {
			panic("kafka: RegisterKind: nil produce function")
		}
		send = p
	}
	transport.Defaults(&opts.Timeout, &opts.MaxHistory, &opts.MaxHistoryBytes, DefaultMaxHistory, DefaultMaxHistoryBytes)
	transport.RegisterKind(r, Kind, opts.validate, func(ctx context.Context, j *redrive.Job) error {
		var rec Record
		if err := json.Unmarshal(j.Payload, &rec); err != nil {
			return &failure.Error{Class: failure.Permanent, Reason: failure.ReasonUndecodablePayload,
				Err: fmt.Errorf("the payload is not a Kafka record: %w", err)}
		}
		if err := opts.validate(j.Payload); err != nil {
			return &failure.Error{Class: failure.Permanent, Reason: "kafka_topic_not_allowed", Err: err}
		}
		events, err := carry.JobHistory(ctx, j, opts.Get)
		if err != nil {
			return err
		}
		hist, dropped := carry.History(events, 0, opts.MaxHistory, opts.MaxHistoryBytes)
		set := map[string]string{HeaderHistory: hist, HeaderRedriven: strconv.Itoa(j.Redriven)}
		if dropped > 0 {
			set[HeaderHistoryDropped] = strconv.Itoa(dropped)
		}
		out := rec.produced(set)
		out.Partition, out.Offset = -1, -1
		if err := SealRecord(out, opts.Bodies); err != nil {
			return err
		}
		if traceOf(out) == "" {
			// No trace of its own (none, or a malformed one, dropped
			// with its tracestate): its attempts join this one's.
			InjectTrace(ctx, out)
		}
		pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		if err := send(pctx, out); err != nil {
			return produceFailure(rec.Topic, err)
		}
		where := ""
		if out.Partition >= 0 && out.Offset >= 0 {
			where = fmt.Sprintf(" at partition %d offset %d", out.Partition, out.Offset)
		}
		redrive.Record(ctx, "produced", fmt.Sprintf("produced to topic %s%s (value %d bytes, %s)", rec.Topic, where, len(rec.Value),
			nonEmpty(rec.ValueEncoding, "null")))
		return nil
	})
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// produceFailure classifies a failed produce to topic.
func produceFailure(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidTopicException):
		return &failure.Error{Class: failure.Permanent, Reason: "kafka_unknown_topic",
			Err: fmt.Errorf("topic %q does not exist on the cluster: %w", topic, err)}
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidRecord):
		return &failure.Error{Class: failure.Permanent, Reason: "kafka_record_refused",
			Err: fmt.Errorf("produce to topic %q: %w", topic, err)}
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed), errors.Is(err, kerr.SaslAuthenticationFailed):
		return &failure.Error{Class: failure.NeedsAuth, Reason: "kafka_not_authorized",
			Err: fmt.Errorf("produce to topic %q: %w", topic, err)}
	}
	return &failure.Error{Class: failure.Transient, Reason: "kafka_produce", Err: fmt.Errorf("produce to topic %q: %w", topic, err)}
}
