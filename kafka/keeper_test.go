package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// openStore opens a fresh SQLite store and its client.
func openStore(t *testing.T) *redrive.Client {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return redrive.NewClient(st, redrive.ClientOptions{Logger: testLogger(t)})
}

// runKeeper runs k until the returned stop is called (or the test ends).
func runKeeper(t *testing.T, k *kafka.Keeper) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("keeper.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// committed returns the offsets group committed on topic, summed over
// its partitions.
func committed(t *testing.T, adm *kadm.Client, group, topic string) int64 {
	t.Helper()
	o, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	o.Each(func(r kadm.OffsetResponse) {
		if r.Topic == topic && r.Err == nil && r.At > 0 {
			n += r.At
		}
	})
	return n
}

// TestKeeperAndRedrive: a consumer's dead letters become dead jobs in a
// store, their binary keys, values and headers byte-exact; offsets are
// committed only once stored, so a store that fails, and a keeper that
// stops meanwhile, lose nothing; a dead letter delivered twice is kept
// once; redriving a dead job produces its record back to the main topic,
// byte-exact with its history, where the consumer runs it again.
func TestKeeperAndRedrive(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	type run struct {
		job *redrive.Job
		rec *kgo.Record
	}
	runs := make(chan run, 16)
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		runs <- run{j, r}
		switch {
		case fixed.Load():
			return nil
		case bytes.HasPrefix(j.Payload, []byte("bad")):
			return &failure.Error{Class: failure.Permanent, Reason: "bad_scan", Err: errors.New("not a PDF")}
		}
		return errors.New("scanner unavailable")
	})
	running(t, cons)
	topo, _ := cons.Topology(topic)

	key, value := []byte{0x00, 0xff, 'k'}, []byte{0x00, 0x01, 0xfe, 0xff, 'A'}
	headers := []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("scan")}, {Key: "tenant", Value: []byte("acme")},
		{Key: "bin", Value: []byte{0xff, 0x00}}, {Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")}}
	cl := c.client(t)
	c.produce(t, cl, &kgo.Record{Topic: topic, Key: key, Value: value, Headers: headers},
		&kgo.Record{Topic: topic, Key: []byte("b"), Value: []byte("bad one"), Headers: headers[:1]})
	dead := c.readAll(t, topo.DLT(), 2)

	client := openStore(t)
	var failing atomic.Bool
	failing.Store(true)
	var calls atomic.Int64
	add := func(ctx context.Context, jobs []store.DeadJob) ([]*store.Job, error) {
		calls.Add(1)
		if failing.Load() {
			return nil, errors.New("disk unplugged")
		}
		return client.AddDead(ctx, jobs)
	}
	group := topic + "-keeper"
	newKeeper := func() *kafka.Keeper {
		k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: c.brokers, Group: group, Topologies: []kafka.Topology{topo}, Add: add,
			Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	adm := kadm.NewClient(cl)

	// The store fails: nothing is kept, nothing committed; the keeper
	// stops; a new one, the store back, keeps everything.
	k := newKeeper()
	stop := runKeeper(t, k)
	eventually(t, "the keeper tried the store twice", 20*time.Second, func() bool { return calls.Load() >= 2 })
	if s := k.Stats()[topic]; s.Kept != 0 || s.StoreFailures < 2 {
		t.Fatalf("stats while the store fails: %+v", s)
	}
	stop()
	if n := committed(t, adm, group, topo.DLT()); n != 0 {
		t.Fatalf("the keeper committed offset %d of dead letters it could not store", n)
	}
	failing.Store(false)
	k = newKeeper()
	runKeeper(t, k)
	eventually(t, "both dead letters kept", 20*time.Second, func() bool { return k.Stats()[topic].Kept == 2 })
	eventually(t, "their offsets committed", 20*time.Second, func() bool { return committed(t, adm, group, topo.DLT()) == 2 })

	// Delivered twice (a consumer that died between producing a dead
	// letter and committing its record produces it again): kept once.
	again := *dead[0]
	c.produce(t, cl, &kgo.Record{Topic: again.Topic, Key: again.Key, Value: again.Value, Headers: again.Headers})
	eventually(t, "the duplicate dropped", 20*time.Second, func() bool { return k.Stats()[topic].Duplicates == 1 })
	eventually(t, "its offset committed", 20*time.Second, func() bool { return committed(t, adm, group, topo.DLT()) == 3 })

	res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: topic}, redrive.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("%d dead jobs, want 2", len(res.Jobs))
	}
	var binJob *redrive.Job
	for _, j := range res.Jobs {
		full, err := client.Get(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		var rec kafka.Record
		if err := json.Unmarshal(full.Payload, &rec); err != nil {
			t.Fatal(err)
		}
		if full.Kind != kafka.Kind || rec.Topic != topic || full.Fingerprint == "" || full.DeadAt == nil || full.CreatedAt.After(*full.DeadAt) ||
			!strings.HasPrefix(full.IdempotencyKey, "kafka:"+topic+"/0/") || !strings.HasSuffix(full.IdempotencyKey, ":0") ||
			!strings.HasPrefix(rec.DeadLetter, topo.DLT()+"/0/") || !strings.HasPrefix(rec.Origin, topic+"/0/") {
			t.Errorf("dead job: kind %s topic %s fingerprint %q key %q created %v dead %v record %+v", full.Kind, rec.Topic,
				full.Fingerprint, full.IdempotencyKey, full.CreatedAt, full.DeadAt, rec)
		}
		switch {
		case bytes.Equal(rec.Key, key):
			binJob = full
			var hs []string
			for _, h := range rec.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			if !bytes.Equal(rec.Value, value) || rec.ValueEncoding != kafka.EncodingBase64 || rec.KeyEncoding != kafka.EncodingBase64 ||
				strings.Join(hs, " ") != "x-redrive-kind=scan tenant=acme bin=\xff\x00 dup=1 dup=2" || rec.Headers[2].ValueEncoding != kafka.EncodingBase64 {
				t.Errorf("the binary record stored as %+v (headers %q)", rec, hs)
			}
			if full.Attempt != 2 || full.DeadReason != "retries_exhausted" || full.LastError != "scanner unavailable" ||
				full.LastErrorClass != failure.Unknown || len(full.History) != 2 || full.History[0].Kind != store.EventRetry ||
				full.History[1].Kind != store.EventDead {
				t.Errorf("binary: attempt %d reason %s error %q class %s history %+v", full.Attempt, full.DeadReason, full.LastError,
					full.LastErrorClass, full.History)
			}
		default:
			if string(rec.Value) != "bad one" || rec.ValueEncoding != kafka.EncodingText || full.Attempt != 1 ||
				full.DeadReason != "permanent" || full.LastErrorClass != failure.Permanent || full.LastError != "not a PDF" ||
				len(full.History) != 1 || full.History[0].Reason != "bad_scan" {
				t.Errorf("bad one: %+v, job attempt %d reason %s class %s error %q history %+v", rec, full.Attempt, full.DeadReason,
					full.LastErrorClass, full.LastError, full.History)
			}
		}
	}
	if binJob == nil {
		t.Fatal("the binary dead letter is not stored")
	}

	// Redrive the binary one from the store: the store's worker produces
	// it back to the main topic, where the consumer runs it again.
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{topic: 1}, Logger: testLogger(t),
		PollInterval: 20 * time.Millisecond})
	kafka.RegisterKind(w, cl, kafka.KindOptions{Get: client.Get, Topics: []string{topic}})
	// The kind produces to the allowed topics only: anything else is
	// refused at enqueue, naming the field.
	_, err = client.Enqueue(context.Background(), kafka.Kind, json.RawMessage(`{"topic":"elsewhere","value":"x"}`), redrive.InQueue(topic))
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.topic" {
		t.Errorf("enqueue to a topic not allowed: %v, want ErrInvalid on payload.topic", err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wcancel(); <-wdone }()
	for len(runs) > 0 {
		<-runs
	}
	fixed.Store(true)
	if _, err := client.Redrive(context.Background(), redrive.RedriveRequest{IDs: []int64{binJob.ID}, Note: "scanner fixed"}); err != nil {
		t.Fatal(err)
	}
	var got run
	select {
	case got = <-runs:
	case <-time.After(30 * time.Second):
		t.Fatal("the redriven record never reached the consumer")
	}
	if !bytes.Equal(got.job.Payload, value) || !bytes.Equal(got.rec.Key, key) || got.job.Attempt != 1 || got.job.Redriven != 1 ||
		got.rec.Topic != topic {
		t.Errorf("the consumer ran %s/%x attempt %d redriven %d value %x", got.rec.Topic, got.rec.Key, got.job.Attempt, got.job.Redriven, got.job.Payload)
	}
	var hs []string
	for _, h := range got.rec.Headers {
		if !strings.HasPrefix(h.Key, "x-redrive-") || h.Key == kafka.HeaderKind {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
	}
	if strings.Join(hs, " ") != "x-redrive-kind=scan tenant=acme bin=\xff\x00 dup=1 dup=2" {
		t.Errorf("headers back on the main topic: %q", hs)
	}
	if header(got.rec, kafka.HeaderAttempt) != "" || header(got.rec, kafka.HeaderReason) != "" {
		t.Errorf("produced back with dead-letter state: %v", got.rec.Headers)
	}
	var kinds []string
	for _, e := range got.job.History {
		kinds = append(kinds, string(e.Kind))
	}
	if strings.Join(kinds, " ") != "retry dead redriven" || got.job.History[2].Note != "scanner fixed" {
		t.Errorf("the history the consumer sees: %v", kinds)
	}
	eventually(t, "the stored job completed", 20*time.Second, func() bool {
		j, err := client.Get(context.Background(), binJob.ID)
		return err == nil && j.State == redrive.Completed
	})
	j, _ := client.Get(context.Background(), binJob.ID)
	if last := j.History[len(j.History)-1]; last.Kind != store.EventCompleted || last.Reason != "produced" ||
		!strings.Contains(last.Note, "produced to topic "+topic+" at partition 0 offset ") {
		t.Errorf("last event %+v, want completed/produced", last)
	}
}

// TestDeadJobOfForeignRecords: a record produced to a DLT by something
// else than redrive, or with headers redrive cannot read, is kept with
// what can be said.
func TestDeadJobOfForeignRecords(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	plain := &kgo.Record{Topic: "t-dlt", Partition: 3, Offset: 12, Value: []byte("x"), Timestamp: now.Add(-time.Minute)}
	dj, err := kafka.DeadJobOf(plain, "t", now)
	if err != nil {
		t.Fatal(err)
	}
	if dj.Queue != "t" || dj.Kind != kafka.Kind || dj.DeadReason != "dead_lettered" || dj.LastErrorClass != failure.Unknown ||
		!dj.DeadAt.Equal(plain.Timestamp) || dj.IdempotencyKey != "kafka:t-dlt/3/12:0" || len(dj.History) != 1 ||
		dj.History[0].Kind != store.EventDead || dj.Fingerprint == "" {
		t.Errorf("a plain record: %+v", dj)
	}
	bad := &kgo.Record{Topic: "t-dlt", Partition: 0, Offset: 4, Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderAttempt, Value: []byte("many")}, {Key: kafka.HeaderOriginTopic, Value: []byte("t")},
			{Key: kafka.HeaderOriginOffset, Value: []byte("9")}, {Key: "tenant", Value: []byte("acme")}}}
	dj, err = kafka.DeadJobOf(bad, "t", now)
	if err != nil {
		t.Fatal(err)
	}
	var rec kafka.Record
	if err := json.Unmarshal(dj.Payload, &rec); err != nil {
		t.Fatal(err)
	}
	if dj.DeadReason != redrive.ReasonUndecodable || dj.LastErrorClass != failure.Permanent || !strings.Contains(dj.LastError, "x-redrive-attempt") ||
		!dj.DeadAt.Equal(now) || dj.IdempotencyKey != "kafka:t-dlt/0/4:0" || len(rec.Headers) != 1 || rec.Headers[0].Key != "tenant" {
		t.Errorf("undecodable headers: %+v, record %+v", dj, rec)
	}
	good := &kgo.Record{Topic: "t-dlt", Partition: 1, Offset: 2, Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderOriginTopic, Value: []byte("t")}, {Key: kafka.HeaderOriginPartition, Value: []byte("2")},
			{Key: kafka.HeaderOriginOffset, Value: []byte("30")}, {Key: kafka.HeaderRedriven, Value: []byte("2")},
			{Key: kafka.HeaderFirstFailure, Value: []byte("1699999990000")}, {Key: kafka.HeaderDeadAt, Value: []byte("1699999999000")},
			{Key: kafka.HeaderReason, Value: []byte("permanent")}, {Key: kafka.HeaderClass, Value: []byte("permanent")},
			{Key: kafka.HeaderError, Value: []byte("no such document 1234")}, {Key: kafka.HeaderCause, Value: []byte("http_404")}}}
	dj, _ = kafka.DeadJobOf(good, "t", now)
	if dj.IdempotencyKey != "kafka:t/2/30:2" || dj.Redriven != 2 || !dj.CreatedAt.Equal(time.UnixMilli(1699999990000)) ||
		!dj.DeadAt.Equal(time.UnixMilli(1699999999000)) || dj.History[0].Reason != "http_404" || dj.LastErrorClass != failure.Permanent {
		t.Errorf("a redrive dead letter: %+v", dj)
	}
	// The fingerprint groups by cause: another document, same group.
	good.Headers[8].Value = []byte("no such document 98765")
	if dj2, _ := kafka.DeadJobOf(good, "t", now); dj2.Fingerprint != dj.Fingerprint {
		t.Errorf("fingerprints %s and %s differ for one cause", dj.Fingerprint, dj2.Fingerprint)
	}
}

// TestNewKeeperRefuses: a keeper needs brokers, topics that can name
// store queues, and a store; a topic without retry tiers (a policy
// without retries) is fine.
func TestNewKeeperRefuses(t *testing.T) {
	add := func(context.Context, []store.DeadJob) ([]*store.Job, error) { return nil, nil }
	b := []string{"localhost:9092"}
	for _, c := range []struct {
		opts kafka.KeeperOptions
		want string
	}{
		{kafka.KeeperOptions{Topologies: []kafka.Topology{{Topic: "t"}}, Add: add}, "no brokers"},
		{kafka.KeeperOptions{Brokers: b, Add: add}, "no topics"},
		{kafka.KeeperOptions{Brokers: b, Topologies: []kafka.Topology{{Topic: "t"}}}, "no store"},
		{kafka.KeeperOptions{Brokers: b, Topologies: []kafka.Topology{{Topic: "a b"}}, Add: add}, `topic "a b"`},
		{kafka.KeeperOptions{Brokers: b, Topologies: []kafka.Topology{{Topic: strings.Repeat("t", 220)}}, Add: add}, "cannot name a store queue"},
		{kafka.KeeperOptions{Brokers: b, Topologies: []kafka.Topology{{Topic: "t"}, {Topic: "t"}}, Add: add}, "given twice"},
	} {
		if _, err := kafka.NewKeeper(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.want)
		}
	}
	k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: b, Topologies: []kafka.Topology{{Topic: "t"}}, Add: add})
	if err != nil || k.Group() != kafka.DefaultKeeperGroup {
		t.Errorf("a topic without tiers: %v", err)
	}
}

// TestDeadJobOfUndecodableKeepsOrigin: an undecodable dead letter whose
// origin headers can be read is keyed by its origin, so the same dead
// letter produced twice (an at-least-once retry of the produce) is kept
// once. (It was keyed by its position in the DLT: two jobs.)
func TestDeadJobOfUndecodableKeepsOrigin(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	at := func(offset int64) *kgo.Record {
		return &kgo.Record{Topic: "t-dlt", Partition: 0, Offset: offset, Value: []byte("x"),
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderHistory, Value: []byte("not json")},
				{Key: kafka.HeaderOriginTopic, Value: []byte("t")}, {Key: kafka.HeaderOriginPartition, Value: []byte("2")},
				{Key: kafka.HeaderOriginOffset, Value: []byte("30")}, {Key: kafka.HeaderReason, Value: []byte("undecodable")}}}
	}
	a, err := kafka.DeadJobOf(at(4), "t", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kafka.DeadJobOf(at(5), "t", now)
	if err != nil {
		t.Fatal(err)
	}
	if a.DeadReason != redrive.ReasonUndecodable || a.IdempotencyKey != "kafka:t/2/30:0" || b.IdempotencyKey != a.IdempotencyKey {
		t.Errorf("keys %q and %q (reason %s), want both kafka:t/2/30:0", a.IdempotencyKey, b.IdempotencyKey, a.DeadReason)
	}
}

// TestUndecodableRetryKeepsOrigin: a retry whose history cannot be read
// is dead-lettered with the origin its headers give (where it was first
// consumed), not its position in the tier, so the keeper keys it like
// the record's other lives.
func TestUndecodableRetryKeepsOrigin(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error { return nil })
	c.ensure(t, cons, topic)
	topo, _ := cons.Topology(topic)
	running(t, cons)
	c.produce(t, c.client(t), &kgo.Record{Topic: topo.TierTopic(10 * time.Millisecond), Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}, {Key: kafka.HeaderHistory, Value: []byte("not json")},
			{Key: kafka.HeaderOriginTopic, Value: []byte(topic)}, {Key: kafka.HeaderOriginPartition, Value: []byte("0")},
			{Key: kafka.HeaderOriginOffset, Value: []byte("41")}}})
	dead := c.readAll(t, topo.DLT(), 1)[0]
	if header(dead, kafka.HeaderReason) != "undecodable" || header(dead, kafka.HeaderOriginTopic) != topic ||
		header(dead, kafka.HeaderOriginOffset) != "41" {
		t.Errorf("dead letter: reason %q, origin %s/%s, want undecodable, %s/41", header(dead, kafka.HeaderReason),
			header(dead, kafka.HeaderOriginTopic), header(dead, kafka.HeaderOriginOffset), topic)
	}
	dj, err := kafka.DeadJobOf(dead, topic, time.Now())
	if err != nil || dj.IdempotencyKey != "kafka:"+topic+"/0/41:0" {
		t.Errorf("kept as %q %v, want its origin's key", dj.IdempotencyKey, err)
	}
}
