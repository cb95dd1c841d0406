package amqp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestKeeperSealedBodies: a dead letter's body is stored sealed once. In
// a queue whose store payloads are sealed, a sealed body is opened (the
// store seals the whole message); elsewhere it is kept as it came, and a
// plaintext body of a queue whose bodies are sealed is sealed. A redrive
// publishes the body back sealed and marked either way.
func TestKeeperSealedBodies(t *testing.T) {
	t.Parallel()
	c := dial(t)
	qs, qc := newQueue(t, c), newQueue(t, c)
	keys := sealKeys(t, "k1")
	bodies := &redrive.SealedBodies{Keys: keys, Names: map[string]bool{qs: true, qc: true}}
	policy := &seal.Policy{Keys: keys, Queues: map[string]bool{qs: true}}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet(),
		Payloads: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet()})
	topos := []amqp.Topology{{Queue: qs}, {Queue: qc}}
	k, err := amqp.NewKeeper(c, amqp.KeeperOptions{Topologies: topos, Add: client.AddDead, Logger: testLogger(t),
		Bodies: bodies, StoreSeals: policy.Seals})
	if err != nil {
		t.Fatal(err)
	}
	for _, topo := range topos {
		if err := topo.DeclareConn(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	plain := []byte(`{"token":"tok-4111111111111111"}`)
	sealedFor := func(q string) []byte {
		s, _, err := bodies.Seal(q, plain)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dead := func(id, q string, body []byte, marked bool) amqp091.Publishing {
		h := amqp091.Table{amqp.HeaderReason: "permanent", amqp.HeaderClass: "permanent", amqp.HeaderError: "no",
			amqp.HeaderAttempt: int64(1), amqp.HeaderOrigin: q}
		if marked {
			h[redrive.HeaderSealed] = "k1"
		}
		return amqp091.Publishing{MessageId: id, Type: "sec", Body: body, Headers: h}
	}
	publishRaw(t, c, qs+"-dlq", dead("s-sealed", qs, sealedFor(qs), true))
	publishRaw(t, c, qc+"-dlq", dead("c-sealed", qc, sealedFor(qc), true))
	publishRaw(t, c, qc+"-dlq", dead("c-plain", qc, plain, false))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("keeper.Run: %v", err)
		}
	})
	eventually(t, "three kept", 20*time.Second, func() bool { return k.Stats()[qs].Kept+k.Stats()[qc].Kept == 3 })
	jobs := map[string]*redrive.Job{}
	for _, q := range []string{qs, qc} {
		res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: q}, redrive.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			full, err := client.Get(context.Background(), j.ID)
			if err != nil {
				t.Fatal(err)
			}
			var m amqp.Message
			if err := json.Unmarshal(full.Payload, &m); err != nil {
				t.Fatal(err)
			}
			jobs[m.MessageID] = full
			switch m.MessageID {
			case "s-sealed": // the store seals it: the body inside is plaintext
				if full.PayloadKey != "k1" || !bytes.Equal(m.Body, plain) || m.Headers[redrive.HeaderSealed] != nil {
					t.Errorf("s-sealed stored: key %q body %s headers %v", full.PayloadKey, m.Body, m.Headers)
				}
			case "c-sealed", "c-plain": // the store does not: the body is the envelope
				if full.PayloadKey != "" || !seal.IsSealed(m.Body) || m.Headers[redrive.HeaderSealed] != "k1" {
					t.Errorf("%s stored: key %q body %s headers %v", m.MessageID, full.PayloadKey, m.Body, m.Headers)
				}
				if got, err := bodies.Open(qc, m.Body, true); err != nil || !bytes.Equal(got, plain) {
					t.Errorf("%s: the stored body opens to %q, %v", m.MessageID, got, err)
				}
			}
		}
	}
	if len(jobs) != 3 {
		t.Fatalf("dead jobs %v", jobs)
	}

	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{qs: 1, qc: 1}, Logger: testLogger(t)})
	amqp.RegisterKind(w, pub, amqp.KindOptions{Get: client.Get, Queues: []string{qs, qc}, Bodies: bodies})
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wcancel(); <-wdone }()
	if _, err := client.Redrive(context.Background(), redrive.RedriveRequest{IDs: []int64{jobs["s-sealed"].ID, jobs["c-sealed"].ID}}); err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range []string{qs, qc} {
		var got amqp091.Delivery
		eventually(t, "the message back in "+q, 20*time.Second, func() bool {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			got = d
			return ok
		})
		if got.Headers[redrive.HeaderSealed] != "k1" || bytes.Contains(got.Body, []byte("tok-")) {
			t.Errorf("%s: published back %q headers %v, want sealed and marked", q, got.Body, got.Headers)
		}
		if b, err := bodies.Open(q, got.Body, true); err != nil || !bytes.Equal(b, plain) {
			t.Errorf("%s: published back, opens to %q %v", q, b, err)
		}
	}
}
