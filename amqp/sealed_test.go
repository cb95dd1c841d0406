package amqp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// sealKeys returns a key list of the ids given, each key derived from its
// id's first byte, the first current.
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

// rawBodies reads the ready messages of a queue with the raw client,
// unacknowledged, and hands them back (closing the channel requeues
// them): what the broker holds.
func rawBodies(t testing.TB, c *amqp.Conn, queue string) map[string]amqp091.Delivery {
	t.Helper()
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	out := map[string]amqp091.Delivery{}
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out[d.MessageId] = d
	}
}

// TestSealedBodies: with Bodies, the publisher seals and marks a job's
// body; the broker holds ciphertext; the consumer's handler sees the
// plaintext, through retries via the delay queue; the dead letter holds
// the very bytes published (never re-sealed per hop); a body under an
// old key still opens (rotation); a body under a key the consumer lacks,
// or marked sealed but not an envelope, is dead at once, permanent,
// undecryptable, its handler never called; a plaintext body on the
// sealed queue runs and is counted; a DLQ redrive keeps the body sealed
// and it runs opened.
func TestSealedBodies(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const secret = "tok-4111111111111111"
	old := &redrive.SealedBodies{Keys: sealKeys(t, "k1"), Names: map[string]bool{q: true}}
	rotated := &redrive.SealedBodies{Keys: sealKeys(t, "k2", "k1"), Names: map[string]bool{q: true}}
	stranger := &redrive.SealedBodies{Keys: sealKeys(t, "k9"), All: true}
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}}, Bodies: rotated,
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := cons.Topology(q)
	if err := topo.DeclareConn(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		seen  = map[string][]string{} // message id: the payloads its attempts saw
		heal  atomic.Bool
		calls atomic.Int64
	)
	cons.HandleFunc("sec", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		mu.Lock()
		seen[j.IdempotencyKey] = append(seen[j.IdempotencyKey], string(j.Payload))
		mu.Unlock()
		if strings.Contains(string(j.Payload), `"fail"`) && !heal.Load() {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	publish := func(b *redrive.SealedBodies, id, mode string) {
		t.Helper()
		pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{Bodies: b})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		if _, err := pub.Enqueue(context.Background(), "sec", map[string]string{"token": secret, "mode": mode},
			redrive.InQueue(q), redrive.IdempotencyKey(id)); err != nil {
			t.Fatal(err)
		}
	}
	publish(old, "old-key", "fail")
	publish(rotated, "new-key", "ok")
	publish(nil, "plaintext", "ok")
	publish(stranger, "unknown-key", "ok")
	publishRaw(t, c, q, amqp091.Publishing{Type: "sec", MessageId: "not-envelope", Body: []byte(`{"token":"x"}`),
		Headers: amqp091.Table{redrive.HeaderSealed: "k2"}})

	raw := rawBodies(t, c, q)
	if len(raw) != 5 {
		t.Fatalf("%d messages in the work queue, want 5", len(raw))
	}
	for id, want := range map[string]string{"old-key": "k1", "new-key": "k2", "unknown-key": "k9"} {
		d := raw[id]
		if bytes.Contains(d.Body, []byte(secret)) || bytes.Contains(d.Body, []byte("token")) || !bytes.HasPrefix(d.Body, []byte(`"rdenc:`+want+`:`)) {
			t.Errorf("%s: the broker holds %q, want an envelope under %s", id, d.Body, want)
		}
		if d.Headers[redrive.HeaderSealed] != want {
			t.Errorf("%s: header %s = %v, want %s", id, redrive.HeaderSealed, d.Headers[redrive.HeaderSealed], want)
		}
	}
	if d := raw["plaintext"]; !bytes.Contains(d.Body, []byte(secret)) || d.Headers[redrive.HeaderSealed] != nil {
		t.Errorf("plaintext publish: body %q headers %v", d.Body, d.Headers)
	}

	running(t, cons)
	eventually(t, "three dead letters", 30*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 3 })
	eventually(t, "the good ones ran", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["new-key"]) == 1 && len(seen["plaintext"]) == 1
	})
	mu.Lock()
	for _, id := range []string{"old-key", "new-key", "plaintext"} {
		for _, got := range seen[id] {
			if !strings.Contains(got, secret) {
				t.Errorf("%s: the handler saw %q, want the plaintext", id, got)
			}
		}
	}
	if n := len(seen["old-key"]); n != 3 {
		t.Errorf("old-key ran %d times, want 3 (two retries through the delay queue)", n)
	}
	if len(seen["unknown-key"])+len(seen["not-envelope"]) != 0 {
		t.Errorf("an undecryptable body reached the handler: %v", seen)
	}
	mu.Unlock()

	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), 10)
	if err != nil || len(dead) != 3 {
		t.Fatalf("peek: %v, %d", err, len(dead))
	}
	for _, d := range dead {
		if !bytes.Equal(d.Body, raw[d.MessageID].Body) {
			t.Errorf("%s: the dead letter's body %q is not the body published %q", d.MessageID, d.Body, raw[d.MessageID].Body)
		}
		switch d.MessageID {
		case "old-key":
			if d.Reason != retry.ReasonExhausted || d.Attempts != 3 {
				t.Errorf("old-key: reason %q attempts %d", d.Reason, d.Attempts)
			}
		case "unknown-key", "not-envelope":
			if d.Reason != redrive.ReasonUndecryptable || d.Class != "permanent" || d.Attempts != 1 ||
				!strings.Contains(d.Error, "undecryptable") {
				t.Errorf("%s: reason %q class %q attempts %d error %q", d.MessageID, d.Reason, d.Class, d.Attempts, d.Error)
			}
		default:
			t.Errorf("unexpected dead letter %s", d.MessageID)
		}
	}
	if st := cons.Stats(); st.Undecryptable != 2 || st.Plaintext != 1 || st.Dead != 3 {
		t.Errorf("stats: %+v", st)
	}

	// A redrive publishes the dead letters back as they are: the sealed
	// one runs with its plaintext, the undecryptable ones die again.
	heal.Store(true)
	before := calls.Load()
	if _, err := dlq.Redrive(context.Background(), amqp.RedriveOptions{Rate: -1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the redriven message ran", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["old-key"]) == 4
	})
	eventually(t, "the undecryptable ones are dead again", 30*time.Second, func() bool {
		return depth(t, c, topo.DLQ()) == 2 && cons.Stats().Undecryptable == 4
	})
	if got := calls.Load() - before; got != 1 {
		t.Errorf("%d handler calls after the redrive, want 1", got)
	}
	mu.Lock()
	if got := seen["old-key"][3]; !strings.Contains(got, secret) {
		t.Errorf("redriven: the handler saw %q", got)
	}
	mu.Unlock()
}
