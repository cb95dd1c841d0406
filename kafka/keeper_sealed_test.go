package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestKeeperSealedValues: a dead letter's value is stored sealed once.
// In a topic whose store payloads are sealed, a sealed value is opened
// (the store seals the whole record); elsewhere it is kept as it came,
// and a plaintext value of a topic whose values are sealed is sealed. A
// redrive produces the value back sealed and marked either way.
func TestKeeperSealedValues(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ts, tc := newTopic(t), newTopic(t)
	keys := sealKeys(t, "k1")
	bodies := &redrive.SealedBodies{Keys: keys, Names: map[string]bool{ts: true, tc: true}}
	policy := &seal.Policy{Keys: keys, Queues: map[string]bool{ts: true}}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: testLogger(t),
		Payloads: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: testLogger(t)})
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}
	topos := []kafka.Topology{kafka.NewTopology(ts, p), kafka.NewTopology(tc, p)}
	k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: c.brokers, Group: ts + "-keeper", Topologies: topos, Add: client.AddDead,
		Logger: testLogger(t), Bodies: bodies, StoreSeals: policy.Seals})
	if err != nil {
		t.Fatal(err)
	}
	runKeeper(t, k)
	c.waitTopics(t, topos[0].DLT(), topos[1].DLT())
	plain := []byte(`{"token":"tok-4111111111111111"}`)
	dead := func(key, topic string, seal bool) *kgo.Record {
		r := &kgo.Record{Topic: topic + "-dlt", Key: []byte(key), Value: plain, Headers: []kgo.RecordHeader{
			{Key: kafka.HeaderKind, Value: []byte("sec")}, {Key: kafka.HeaderReason, Value: []byte("permanent")},
			{Key: kafka.HeaderClass, Value: []byte("permanent")}, {Key: kafka.HeaderAttempt, Value: []byte("1")}}}
		if seal {
			out, id, err := bodies.Seal(topic, plain)
			if err != nil {
				t.Fatal(err)
			}
			r.Value = out
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: redrive.HeaderSealed, Value: []byte(id)})
		}
		return r
	}
	cl := c.client(t)
	// The main topics a redrive produces back to.
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, -1, nil, ts, tc); err != nil {
		t.Fatal(err)
	}
	c.waitTopics(t, ts, tc)
	c.produce(t, cl, dead("s-sealed", ts, true), dead("c-sealed", tc, true), dead("c-plain", tc, false))
	eventually(t, "three kept", 30*time.Second, func() bool { return k.Stats()[ts].Kept+k.Stats()[tc].Kept == 3 })
	jobs := map[string]*redrive.Job{}
	for _, q := range []string{ts, tc} {
		res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: q}, redrive.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			full, err := client.Get(context.Background(), j.ID)
			if err != nil {
				t.Fatal(err)
			}
			var rec kafka.Record
			if err := json.Unmarshal(full.Payload, &rec); err != nil {
				t.Fatal(err)
			}
			key := string(rec.Key)
			jobs[key] = full
			marked := ""
			for _, h := range rec.Headers {
				if h.Key == redrive.HeaderSealed {
					marked = string(h.Value)
				}
			}
			switch key {
			case "s-sealed":
				if full.PayloadKey != "k1" || !bytes.Equal(rec.Value, plain) || marked != "" {
					t.Errorf("s-sealed stored: key %q value %s mark %q", full.PayloadKey, rec.Value, marked)
				}
			case "c-sealed", "c-plain":
				if full.PayloadKey != "" || !seal.IsSealed(rec.Value) || marked != "k1" {
					t.Errorf("%s stored: key %q value %s mark %q", key, full.PayloadKey, rec.Value, marked)
				}
				if got, err := bodies.Open(tc, rec.Value, true); err != nil || !bytes.Equal(got, plain) {
					t.Errorf("%s: the stored value opens to %q, %v", key, got, err)
				}
			}
		}
	}
	if len(jobs) != 3 {
		t.Fatalf("dead jobs %v", jobs)
	}

	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{ts: 1, tc: 1}, Logger: testLogger(t)})
	kafka.RegisterKind(w, cl, kafka.KindOptions{Get: client.Get, Topics: []string{ts, tc}, Bodies: bodies})
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wcancel(); <-wdone }()
	if _, err := client.Redrive(context.Background(), redrive.RedriveRequest{IDs: []int64{jobs["s-sealed"].ID, jobs["c-sealed"].ID}}); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{ts, tc} {
		got := c.readAll(t, topic, 1)[0]
		if header(got, redrive.HeaderSealed) != "k1" || bytes.Contains(got.Value, []byte("tok-")) {
			t.Errorf("%s: produced back %q headers %v, want sealed and marked", topic, got.Value, got.Headers)
		}
		if b, err := bodies.Open(topic, got.Value, true); err != nil || !bytes.Equal(b, plain) {
			t.Errorf("%s: produced back, opens to %q %v", topic, b, err)
		}
	}
}
