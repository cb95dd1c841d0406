package kafka

import (
	"bytes"
	"encoding/base64"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// FuzzConsumerOpen: whatever value a record marked sealed (or not)
// carries, the consumer's open never panics and leaves the job either
// with the value (unmarked), with the plaintext a genuine envelope of the
// topic holds, or with no payload and an undecryptable PayloadError,
// counted: never a handler call on ciphertext, never a retry.
func FuzzConsumerOpen(f *testing.F) {
	keys, err := redrive.ParsePayloadKeys([]byte("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))))
	if err != nil {
		f.Fatal(err)
	}
	bodies := &redrive.SealedBodies{Keys: keys, All: true}
	c := &Consumer{opts: ConsumerOptions{Bodies: bodies}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sealed := func(topic, v string) []byte {
		s, _, err := bodies.Seal(topic, []byte(v))
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	f.Add(sealed("t", `{"a":1}`), true, "t")
	f.Add(sealed("u", `{"a":1}`), true, "t")
	f.Add([]byte(`{"a":1}`), true, "t")
	f.Add([]byte(`{"a":1}`), false, "t")
	f.Add([]byte(`"rdenc:k1:AAAA"`), true, "t")
	f.Add([]byte(nil), true, "t")
	f.Fuzz(func(t *testing.T, value []byte, marked bool, topic string) {
		m := &mainTopic{name: topic}
		r := &kgo.Record{Topic: topic, Value: value}
		if marked {
			r.Headers = []kgo.RecordHeader{{Key: redrive.HeaderSealed, Value: []byte("k1")}}
		}
		j := jobOf(r, topic, "k", state{}, time.Now())
		c.open(m, r, j)
		switch {
		case !marked:
			if !bytes.Equal(j.Payload, value) || j.PayloadError != "" || m.stats.plaintext.Load() != 1 {
				t.Fatalf("unmarked: payload %q error %q", j.Payload, j.PayloadError)
			}
		case j.PayloadError != "":
			if j.Payload != nil || !strings.HasPrefix(j.PayloadError, store.ReasonUndecryptable+": ") ||
				m.stats.undecryptable.Load() != 1 {
				t.Fatalf("undecryptable: payload %q error %q", j.Payload, j.PayloadError)
			}
		default:
			want, err := keys.Open(topic, value)
			if err != nil || !bytes.Equal(j.Payload, want) || m.stats.undecryptable.Load() != 0 {
				t.Fatalf("opened %q, the envelope holds %q (%v)", j.Payload, want, err)
			}
		}
	})
}
