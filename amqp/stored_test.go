package amqp_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/amqp"
)

// TestMessageBodyByteExact: every body survives the payload's JSON byte
// for byte, in the encoding that fits it.
func TestMessageBodyByteExact(t *testing.T) {
	for _, c := range []struct {
		body []byte
		enc  string
	}{
		{[]byte(`{"a":1,"b":[true,null]}`), amqp.BodyJSON},
		{[]byte(`{"a": 1,  "b" : 2}`), amqp.BodyText}, // JSON with white space: text, kept as it is
		{[]byte("{\"a\":1}\n"), amqp.BodyText},        // white space around JSON is kept as text
		{[]byte(`"quoted"`), amqp.BodyJSON},
		{[]byte("plain text, é"), amqp.BodyText},
		{[]byte(""), amqp.BodyText},
		{[]byte{0, 0xff, 0x10, 0x80}, amqp.BodyBase64},
		{[]byte("\xc3\x28 invalid UTF-8"), amqp.BodyBase64},
	} {
		m := amqp.Message{Queue: "q", Body: c.body, ContentType: "x/y", Headers: map[string]any{"n": 3.0, "s": "v"},
			Timestamp: time.UnixMilli(1700000000000).UTC()}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("%q: invalid JSON %s", c.body, b)
		}
		var back amqp.Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %v (%s)", c.body, err, b)
		}
		if !bytes.Equal(back.Body, c.body) || back.BodyEncoding != c.enc || back.Queue != "q" || back.ContentType != "x/y" ||
			!back.Timestamp.Equal(m.Timestamp) || back.Headers["s"] != "v" {
			t.Errorf("%q came back as %q (%s), want %s: %s", c.body, back.Body, back.BodyEncoding, c.enc, b)
		}
	}
}

// TestMessageRefused: a payload that is not a message says why.
func TestMessageRefused(t *testing.T) {
	for in, want := range map[string]string{
		`{"body":"x"}`:                                       `"queue" is required`,
		`{"queue":"q","body_encoding":"json"}`:               `"body" is required`,
		`{"queue":"q","body":"!!","body_encoding":"base64"}`: "not base64",
		`{"queue":"q","body":1,"body_encoding":"text"}`:      "must be a JSON string",
		`{"queue":"q","body":"x","body_encoding":"gzip"}`:    "want json, text or base64",
		`[1]`:                                    "cannot unmarshal",
		`{"queue":"q","body":"x","headers":[1]}`: "cannot unmarshal",
	} {
		var m amqp.Message
		err := json.Unmarshal([]byte(in), &m)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", in, err, want)
		}
	}
}

// FuzzMessage: decoding any payload either fails or gives a message that
// encodes and decodes to the same body.
func FuzzMessage(f *testing.F) {
	for _, s := range []string{`{"queue":"q","body":{"a":1},"body_encoding":"json"}`, `{"queue":"q","body":"aGk=","body_encoding":"base64"}`,
		`{"queue":"q","body":"hi"}`, `{"queue":"q","body":"x","headers":{"a":{"b":[1,2.5]}}}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var m amqp.Message
		if json.Unmarshal(in, &m) != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%s decoded but does not encode: %v", in, err)
		}
		var back amqp.Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: re-encoded as %s, which does not decode: %v", in, b, err)
		}
		if !bytes.Equal(back.Body, m.Body) {
			t.Fatalf("%s: body %q came back as %q", in, m.Body, back.Body)
		}
	})
}
