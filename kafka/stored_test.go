package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// TestRecordByteExact: every key, value and header survives the
// payload's JSON byte for byte, nil told from empty, in the encoding
// that fits it.
func TestRecordByteExact(t *testing.T) {
	for _, c := range []struct {
		b   []byte
		enc string
	}{
		{[]byte(`{"a":1,"b":[true,null]}`), kafka.EncodingJSON},
		{[]byte(`{"a": 1}`), kafka.EncodingText}, // JSON with white space: text, kept as it is
		{[]byte("{\"a\":1}\n"), kafka.EncodingText},
		{[]byte(`null`), kafka.EncodingJSON}, // the bytes "null", not a null value
		{[]byte(`"quoted"`), kafka.EncodingJSON},
		{[]byte("plain text, é"), kafka.EncodingText},
		{[]byte{}, kafka.EncodingText},
		{nil, ""},
		{[]byte{0, 0xff, 0x10, 0x80}, kafka.EncodingBase64},
		{[]byte("\xc3\x28 invalid UTF-8"), kafka.EncodingBase64},
	} {
		r := kafka.Record{Topic: "t", Key: c.b, Value: c.b, Origin: "t/0/7",
			Headers: []kafka.Header{{Key: "h", Value: c.b}, {Key: "\xff\x00bin", Value: []byte("x")}, {Key: "h", Value: []byte("again")}}}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("%q: invalid JSON %s", c.b, b)
		}
		var back kafka.Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %v (%s)", c.b, err, b)
		}
		same := func(x, y []byte) bool { return bytes.Equal(x, y) && (x == nil) == (y == nil) }
		if !same(back.Key, c.b) || !same(back.Value, c.b) || back.KeyEncoding != c.enc || back.ValueEncoding != c.enc ||
			back.Topic != "t" || back.Origin != "t/0/7" || len(back.Headers) != 3 || !same(back.Headers[0].Value, c.b) ||
			back.Headers[0].ValueEncoding != c.enc || back.Headers[1].Key != "\xff\x00bin" || string(back.Headers[2].Value) != "again" {
			t.Errorf("%q came back as %+v: %s", c.b, back, b)
		}
	}
	// A JSON value is the payload's JSON itself.
	b, _ := json.Marshal(kafka.Record{Topic: "t", Key: []byte("k"), Value: []byte(`{"doc":7}`)})
	if want := `{"topic":"t","key":"k","key_encoding":"text","value":{"doc":7},"value_encoding":"json"}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}

// TestRecordRefused: a payload that is not a record says why.
func TestRecordRefused(t *testing.T) {
	for in, want := range map[string]string{
		`{"value":"x"}`:                                                               `"topic" is required`,
		`{"topic":"t","value_encoding":"json"}`:                                       "",
		`{"topic":"t","value":"!!","value_encoding":"base64"}`:                        `"value" is not base64`,
		`{"topic":"t","key":1,"key_encoding":"text"}`:                                 `"key" with key_encoding "text" must be a JSON string`,
		`{"topic":"t","value":"x","value_encoding":"gzip"}`:                           `value_encoding "gzip": want json, text or base64`,
		`{"topic":"t","headers":[{"key":"a","value":"!","value_encoding":"base64"}]}`: `header 0 ("a"): "value" is not base64`,
		`{"topic":"t","headers":[{"key":"!","key_encoding":"base64"}]}`:               `header 0: "key" is not base64`,
		`{"topic":"t","headers":[{"key":"a","key_encoding":"json"}]}`:                 `key_encoding "json": want text or base64`,
		`{"topic":"t","headers":{"a":"b"}}`:                                           "cannot unmarshal",
		`[1]`:                                                                         "cannot unmarshal",
	} {
		var r kafka.Record
		err := json.Unmarshal([]byte(in), &r)
		if want == "" {
			// No value with an encoding: no value.
			if err != nil || r.Value != nil {
				t.Errorf("%s: %v %+v, want a record without a value", in, err, r)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", in, err, want)
		}
	}
}

// FuzzRecord: decoding any payload either fails or gives a record that
// encodes and decodes to the same bytes.
func FuzzRecord(f *testing.F) {
	for _, s := range []string{`{"topic":"t","value":{"a":1},"value_encoding":"json"}`,
		`{"topic":"t","key":"aGk=","key_encoding":"base64","value":"hi"}`, `{"topic":"t","value":null}`,
		`{"topic":"t","value":null,"value_encoding":"json"}`,
		`{"topic":"t","headers":[{"key":"a","value":"AP8=","value_encoding":"base64"},{"key":"/w==","key_encoding":"base64"}]}`,
		`{"topic":"t","origin":"t/1/2","dead_letter":"t-dlt/0/5"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var r kafka.Record
		if json.Unmarshal(in, &r) != nil {
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s decoded but does not encode: %v", in, err)
		}
		var back kafka.Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: re-encoded as %s, which does not decode: %v", in, b, err)
		}
		same := func(x, y []byte) bool { return bytes.Equal(x, y) && (x == nil) == (y == nil) }
		if back.Topic != r.Topic || !same(back.Key, r.Key) || !same(back.Value, r.Value) || len(back.Headers) != len(r.Headers) {
			t.Fatalf("%s: %+v came back as %+v", in, r, back)
		}
		for i, h := range r.Headers {
			if back.Headers[i].Key != h.Key || !same(back.Headers[i].Value, h.Value) {
				t.Fatalf("%s: header %d %+v came back as %+v", in, i, h, back.Headers[i])
			}
		}
	})
}

// TestKindProduces: running a job of Kind produces its record with its
// key, value and headers, but any state header a payload holds, its
// origin, its redrive count and history; failures are classified.
func TestKindProduces(t *testing.T) {
	var got []*kgo.Record
	var fail error
	produce := func(ctx context.Context, r *kgo.Record) error {
		if fail != nil {
			return fail
		}
		r.Partition, r.Offset = 2, 41
		got = append(got, r)
		return nil
	}
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: testLogger(t)})
	history := []redrive.Event{{Kind: store.EventDead, Attempt: 3, At: time.UnixMilli(1700000000000), Class: "transient", Error: "boom"},
		{Kind: store.EventRedriven, At: time.UnixMilli(1700000001000), Note: "fixed"}}
	kafka.RegisterKind(exec, produce, kafka.KindOptions{Topics: []string{"scans"},
		Get: func(ctx context.Context, id int64) (*redrive.Job, error) {
			return &redrive.Job{ID: id, History: history}, nil
		}})
	rec := kafka.Record{Topic: "scans", Key: []byte{0xff}, Value: []byte(`{"doc":1}`), Origin: "scans/1/9",
		Headers: []kafka.Header{{Key: "tenant", Value: []byte("acme")}, {Key: kafka.HeaderAttempt, Value: []byte("3")},
			{Key: kafka.HeaderKind, Value: []byte("scan")}, {Key: "nul", Value: nil}}}
	payload, _ := json.Marshal(rec)
	run := func(p []byte) redrive.Outcome {
		return exec.Execute(context.Background(), &redrive.Job{ID: 7, Queue: "scans", Kind: kafka.Kind, Payload: p, Attempt: 1,
			MaxRetries: -1, Redriven: 1, Reprocessable: true})
	}
	o := run(payload)
	if o.Kind != store.Complete || len(got) != 1 {
		t.Fatalf("outcome %+v, %d produced", o, len(got))
	}
	r := got[0]
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	if r.Topic != "scans" || !bytes.Equal(r.Key, []byte{0xff}) || string(r.Value) != `{"doc":1}` ||
		strings.Join(keys, " ") != "tenant x-redrive-kind nul x-redrive-origin-topic x-redrive-origin-partition x-redrive-origin-offset x-redrive-history x-redrive-redriven" ||
		r.Headers[2].Value != nil {
		t.Errorf("produced %s %x %s with headers %v", r.Topic, r.Key, r.Value, keys)
	}
	if header(r, kafka.HeaderRedriven) != "1" || header(r, kafka.HeaderOriginPartition) != "1" || header(r, kafka.HeaderOriginOffset) != "9" {
		t.Errorf("redriven %q origin %q/%q", header(r, kafka.HeaderRedriven), header(r, kafka.HeaderOriginPartition), header(r, kafka.HeaderOriginOffset))
	}
	var h []redrive.Event
	if err := json.Unmarshal([]byte(header(r, kafka.HeaderHistory)), &h); err != nil || len(h) != 2 || h[1].Note != "fixed" {
		t.Errorf("history %v %+v, want the job's (read with Get)", err, h)
	}
	if o.Event == nil || o.Event.Reason != "produced" || !strings.Contains(o.Event.Note, "produced to topic scans at partition 2 offset 41") {
		t.Errorf("event %+v, want the produce recorded", o.Event)
	}

	for _, c := range []struct {
		payload string
		err     error
		class   failure.Class
		reason  string
	}{
		{`{"topic":"elsewhere","value":"x"}`, nil, failure.Permanent, "kafka_topic_not_allowed"},
		{`{"value":"x"}`, nil, failure.Permanent, failure.ReasonUndecodablePayload},
		{string(payload), fmt.Errorf("produce: %w", kerr.UnknownTopicOrPartition), failure.Permanent, "kafka_unknown_topic"},
		{string(payload), kerr.TopicAuthorizationFailed, failure.NeedsAuth, "kafka_not_authorized"},
		{string(payload), context.DeadlineExceeded, failure.Transient, "kafka_produce"},
		{string(payload), errors.New("broker gone"), failure.Transient, "kafka_produce"},
	} {
		fail = c.err
		o := run([]byte(c.payload))
		if o.Class != c.class || o.Event == nil || o.Event.Reason != c.reason {
			t.Errorf("%s / %v: class %v reason %v, want %v %s", c.payload, c.err, o.Class, o.Event, c.class, c.reason)
		}
	}
}
