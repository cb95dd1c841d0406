package kafka_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// sealKeys returns a key list of the ids given, each key derived from its
// id, the first current.
func sealKeys(t testing.TB, ids ...string) *redrive.PayloadKeys {
	t.Helper()
	var lines []string
	for _, id := range ids {
		lines = append(lines, id+":"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{id[0] + id[len(id)-1]}, 32)))
	}
	k, err := redrive.ParsePayloadKeys([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSealedValues: SealRecord seals and marks a record's value; the
// topic holds ciphertext; the consumer's handler sees the plaintext,
// through the retry tiers; the dead letter holds the very bytes
// produced (never re-sealed per hop); a value under an old key still
// opens (rotation); one under a key the consumer lacks, or marked sealed
// but not an envelope, is dead at once, permanent, undecryptable, its
// handler never called; a plaintext value on the sealed topic runs and
// is counted.
func TestSealedValues(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	const secret = "tok-4111111111111111"
	old := &redrive.SealedBodies{Keys: sealKeys(t, "k1"), Names: map[string]bool{topic: true}}
	rotated := &redrive.SealedBodies{Keys: sealKeys(t, "k2", "k1"), Names: map[string]bool{topic: true}}
	stranger := &redrive.SealedBodies{Keys: sealKeys(t, "k9"), All: true}
	p := retry.Policy{MaxRetries: 2, Initial: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond,
		Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Bodies: rotated,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[string][]string{} // record key: the payloads its attempts saw
	)
	cons.HandleFunc("sec", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		seen[j.IdempotencyKey] = append(seen[j.IdempotencyKey], string(j.Payload))
		mu.Unlock()
		if strings.Contains(string(j.Payload), `"fail"`) {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	var produced []*kgo.Record
	for _, r := range []struct {
		key    string
		bodies *redrive.SealedBodies
		mode   string
	}{{"old-key", old, "fail"}, {"new-key", rotated, "ok"}, {"plaintext", nil, "ok"}, {"unknown-key", stranger, "ok"}} {
		rec, err := kafka.NewRecord(topic, "sec", map[string]string{"token": secret, "mode": r.mode}, []byte(r.key))
		if err != nil {
			t.Fatal(err)
		}
		if err := kafka.SealRecord(rec, r.bodies); err != nil {
			t.Fatal(err)
		}
		if err := kafka.SealRecord(rec, r.bodies); err != nil { // marked already: left as it is
			t.Fatal(err)
		}
		produced = append(produced, rec)
	}
	produced = append(produced, &kgo.Record{Topic: topic, Key: []byte("not-envelope"), Value: []byte(`{"token":"x"}`),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("sec")}, {Key: redrive.HeaderSealed, Value: []byte("k2")}}})
	for _, r := range produced {
		c.produce(t, cl, r)
	}

	raw := map[string]*kgo.Record{}
	for _, r := range c.readAll(t, topic, 5) {
		raw[string(r.Key)] = r
	}
	for key, want := range map[string]string{"old-key": "k1", "new-key": "k2", "unknown-key": "k9"} {
		r := raw[key]
		if r == nil || bytes.Contains(r.Value, []byte(secret)) || bytes.Contains(r.Value, []byte("token")) ||
			!bytes.HasPrefix(r.Value, []byte(`"rdenc:`+want+`:`)) || header(r, redrive.HeaderSealed) != want {
			t.Fatalf("%s: the topic holds %+v, want an envelope under %s, marked", key, r, want)
		}
	}
	if r := raw["plaintext"]; !bytes.Contains(r.Value, []byte(secret)) || header(r, redrive.HeaderSealed) != "" {
		t.Errorf("plaintext: %+v", r)
	}

	topo, _ := cons.Topology(topic)
	dead := c.readAll(t, topo.DLT(), 3)
	eventually(t, "the good ones ran", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, v := range seen {
			if strings.HasSuffix(k, "/0/1") || strings.HasSuffix(k, "/0/2") { // new-key, plaintext
				n += len(v)
			}
		}
		return n == 2
	})
	mu.Lock()
	runs := 0
	for k, v := range seen {
		for _, got := range v {
			runs++
			if !strings.Contains(got, secret) {
				t.Errorf("%s: the handler saw %q, want the plaintext", k, got)
			}
		}
	}
	if runs != 5 { // old-key three times, new-key and plaintext once
		t.Errorf("%d handler calls, want 5: %v", runs, seen)
	}
	mu.Unlock()
	for _, d := range dead {
		key := string(d.Key)
		if !bytes.Equal(d.Value, raw[key].Value) {
			t.Errorf("%s: the dead letter's value %q is not the value produced %q", key, d.Value, raw[key].Value)
		}
		switch key {
		case "old-key":
			if header(d, kafka.HeaderReason) != retry.ReasonExhausted || header(d, kafka.HeaderAttempt) != "3" ||
				header(d, redrive.HeaderSealed) != "k1" {
				t.Errorf("old-key's dead letter: %+v", d.Headers)
			}
		case "unknown-key", "not-envelope":
			if header(d, kafka.HeaderReason) != redrive.ReasonUndecryptable || header(d, kafka.HeaderClass) != "permanent" ||
				header(d, kafka.HeaderAttempt) != "1" || !strings.Contains(header(d, kafka.HeaderError), "undecryptable") {
				t.Errorf("%s's dead letter: %+v", key, d.Headers)
			}
		default:
			t.Errorf("unexpected dead letter %s", key)
		}
	}
	if s := cons.Stats()[topic]; s.Undecryptable != 2 || s.Plaintext != 1 || s.Dead != 3 || s.Retried != 2 {
		t.Errorf("stats %+v", s)
	}
}
