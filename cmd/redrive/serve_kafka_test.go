package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store/sqlite"
)

// keptRun is one run of a record by the test's Kafka consumer.
type keptRun struct {
	job *redrive.Job
	rec *kgo.Record
}

// TestServeKeepsKafkaDLT is the Kafka dead-letter proof: a Go
// kafka.Consumer (on the cluster of KAFKA_BROKERS, or kfake) sends records that
// keep failing to its dead-letter topic; `redrive serve --kafka-topics`
// keeps them in the store, byte-exact, where GET /v1/dlq lists them; GET
// /v1/kafka/topics and /metrics show the topic; a dead letter redriven
// with POST /v1/dlq/redrive is produced back to the topic, where the
// consumer runs it again, with both lives in its history, and the job
// completes in the store.
func TestServeKeepsKafkaDLT(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	bin := buildRedrive(t)
	brokers := kafkaCluster(t)
	topic := kafkaTopicName("scans")
	group := topic + "-scanners"

	// The consumer's policy is serve's (the --retry-* flags below), so
	// serve names the same retry tiers.
	p := retry.Policy{MaxRetries: 1, Initial: 100 * time.Millisecond, Multiplier: 2, MaxDelay: 30 * time.Second, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: group,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	runs := make(chan keptRun, 32)
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		runs <- keptRun{j, r}
		switch {
		case string(r.Key) == "bad":
			return redrive.Permanent(errors.New("not a PDF"))
		case string(r.Key) == "ok" || fixed.Load():
			return nil
		}
		return errors.New("scanner unavailable")
	})
	ctx, cancel := context.WithCancel(context.Background())
	consDone := make(chan error, 1)
	go func() { consDone <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-consDone; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})

	const token = "kafka-keeper-token"
	s := startRedrive(t, bin, []string{"REDRIVE_TOKEN=" + token, "REDRIVE_KAFKA_BROKERS=" + strings.Join(brokers, ",")},
		"--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0", "--kafka-topics", topic, "--kafka-group", group,
		"--retry-base", "100ms", "--retry-max-retries", "1", "--retry-jitter", "none", "--queues", "default")
	s.token = token

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	binary := []byte{0x00, 0x01, 0xfe, 0xff, 'A'}
	headers := []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("scan")}, {Key: "tenant", Value: []byte("acme")},
		{Key: "sig", Value: []byte{0xff, 0x00}}}
	for _, r := range []*kgo.Record{{Key: []byte("flaky"), Value: binary}, {Key: []byte("bad"), Value: []byte(`{"doc":2}`)},
		{Key: []byte("ok"), Value: []byte("fine")}} {
		r.Topic, r.Headers = topic, headers
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Both dead letters end in the store, once each, byte-exact.
	type deadJob struct {
		job *redrive.Job
		rec kafka.Record
	}
	dead := map[string]deadJob{}
	eventually(t, "both dead letters in the store", func() bool {
		code, body := s.api("GET", "/v1/dlq?limit=100&queue="+topic, "")
		if code != 200 {
			t.Fatalf("GET /v1/dlq: %d %s", code, body)
		}
		var res struct {
			Jobs []*redrive.Job `json:"jobs"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		dead = map[string]deadJob{}
		for _, j := range res.Jobs {
			var rec kafka.Record
			if err := json.Unmarshal(j.Payload, &rec); err != nil {
				t.Fatalf("job %d: payload %s: %v", j.ID, j.Payload, err)
			}
			if _, dup := dead[string(rec.Key)]; dup {
				t.Fatalf("%s is dead twice in the store", rec.Key)
			}
			dead[string(rec.Key)] = deadJob{j, rec}
		}
		return len(dead) == 2
	})
	flaky, bad := dead["flaky"], dead["bad"]
	if flaky.job == nil || bad.job == nil {
		t.Fatalf("dead jobs %v, want flaky and bad", dead)
	}
	if flaky.job.Kind != kafka.Kind || !bytes.Equal(flaky.rec.Value, binary) || flaky.rec.ValueEncoding != kafka.EncodingBase64 ||
		flaky.rec.Topic != topic || len(flaky.rec.Headers) != 3 || !bytes.Equal(flaky.rec.Headers[2].Value, []byte{0xff, 0x00}) {
		t.Errorf("flaky stored as %+v", flaky.rec)
	}
	if j := getJob(t, s, flaky.job.ID); j.DeadReason != "retries_exhausted" || j.Attempt != 2 || eventKinds(j.History) != "retry dead" {
		t.Errorf("flaky: reason %s attempt %d history %s", j.DeadReason, j.Attempt, eventKinds(j.History))
	}
	if j := getJob(t, s, bad.job.ID); j.DeadReason != "permanent" || j.LastError != "not a PDF" || string(bad.rec.Value) != `{"doc":2}` ||
		bad.rec.ValueEncoding != kafka.EncodingJSON {
		t.Errorf("bad: reason %s error %q record %+v", j.DeadReason, j.LastError, bad.rec)
	}

	checkKafkaViews(t, s, topic, group)

	// Redrive flaky from the API: produced back to the topic, the
	// consumer runs it again and completes it.
	for len(runs) > 0 {
		<-runs
	}
	fixed.Store(true)
	code, body := s.api("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d],"note":"scanner fixed"}`, flaky.job.ID))
	if code != 200 && code != 202 {
		t.Fatalf("redrive: %d %s", code, body)
	}
	var got keptRun
	select {
	case got = <-runs:
	case <-time.After(60 * time.Second):
		t.Fatal("the redriven record never reached the consumer")
	}
	if string(got.rec.Key) != "flaky" || !bytes.Equal(got.job.Payload, binary) || got.job.Attempt != 1 || got.job.Redriven != 1 ||
		eventKinds(got.job.History) != "retry dead redriven" || got.job.History[2].Note != "scanner fixed" {
		t.Errorf("the consumer ran %q %x attempt %d redriven %d history %s", got.rec.Key, got.job.Payload, got.job.Attempt,
			got.job.Redriven, eventKinds(got.job.History))
	}
	eventually(t, "the redriven job completed", func() bool { return getJob(t, s, flaky.job.ID).State == redrive.Completed })
	j := getJob(t, s, flaky.job.ID)
	if kinds := eventKinds(j.History); kinds != "retry dead redriven completed" || j.History[3].Reason != "produced" {
		t.Errorf("flaky's history: %s (last %+v), want retry dead redriven completed, produced", kinds, j.History[len(j.History)-1])
	}
}

// checkKafkaViews: the API and /metrics show the kept topic.
func checkKafkaViews(t *testing.T, s *redriveProc, topic, group string) {
	t.Helper()
	var res struct {
		Topics []kafka.ManagedTopic `json:"topics"`
	}
	eventually(t, "the keeper's offsets committed", func() bool {
		code, body := s.api("GET", "/v1/kafka/topics", "")
		if code != 200 {
			t.Fatalf("GET /v1/kafka/topics: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		return len(res.Topics) == 1 && res.Topics[0].DLT.Lag != nil && *res.Topics[0].DLT.Lag == 0
	})
	kt := res.Topics[0]
	if kt.Topic != topic || kt.Group != group || kt.Error != "" || kt.Keeper == nil || kt.Keeper.Kept != 2 || kt.Keeper.Duplicates != 0 {
		t.Fatalf("kafka topic: %+v keeper %+v", kt, kt.Keeper)
	}
	if kt.Main.Offsets != 3 || kt.Main.Records != nil || kt.Main.Partitions != 2 || kt.Main.Lag == nil || kt.Main.LagGroup != group {
		t.Errorf("main topic: %+v", kt.Main)
	}
	if kt.DLT.Topic != topic+"-dlt" || kt.DLT.Records == nil || *kt.DLT.Records != 2 || kt.DLT.LagGroup != kafka.DefaultKeeperGroup {
		t.Errorf("DLT: %+v", kt.DLT)
	}
	// Tiers 100ms (flaky's retry), then ten times longer up to 1h.
	if len(kt.Tiers) < 2 || kt.Tiers[0].Topic != topic+"-retry-100ms" || kt.Tiers[0].Offsets != 1 || kt.Tiers[0].Missing ||
		kt.Tiers[1].Topic != topic+"-retry-1s" || kt.Tiers[1].Offsets != 0 {
		t.Errorf("tiers %+v", kt.Tiers)
	}
	code, body := s.api("GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{`redrive_kafka_up{topic="` + topic + `"} 1`,
		`redrive_kafka_records{kafka_topic="` + topic + `-dlt",role="dlt",topic="` + topic + `"} 2`,
		`redrive_kafka_offsets{kafka_topic="` + topic + `-retry-100ms",role="tier",topic="` + topic + `"} 1`,
		`redrive_kafka_lag{group="` + kafka.DefaultKeeperGroup + `",kafka_topic="` + topic + `-dlt",role="dlt",topic="` + topic + `"} 0`,
		`redrive_kafka_lag{group="` + group + `",kafka_topic="` + topic + `",role="main",topic="` + topic + `"}`,
		`redrive_kafka_dead_letters_kept_total{topic="` + topic + `"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestRegisterKafka checks that serve's registry gets the kept topics'
// metrics when there are kept topics, and nothing (and no panic)
// without.
func TestRegisterKafka(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerKafka(reg, nil)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("nil topics: %d series, %v; want none", n, err)
	}
	lag, dead := int64(3), int64(1)
	registerKafka(reg, fixedTopics{{TopologyStats: kafka.TopologyStats{Topic: "orders",
		Main: kafka.TopicCount{Topic: "orders", Offsets: 9, Lag: &lag, LagGroup: "g"},
		DLT:  kafka.TopicCount{Topic: "orders-dlt", Offsets: 2, Records: &dead}},
		Keeper: &kafka.KeeperStats{Kept: 1}}})
	for name, want := range map[string]int{
		"redrive_kafka_offsets": 2, "redrive_kafka_records": 1, "redrive_kafka_lag": 1, "redrive_kafka_dead_letters_kept_total": 1, "redrive_kafka_up": 1,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d", name, n, err, want)
		}
	}
}

// fixedTopics is a server.KafkaTopics over a fixed list.
type fixedTopics []kafka.ManagedTopic

func (f fixedTopics) KafkaTopics(context.Context) []kafka.ManagedTopic { return f }

// TestKafkaSideWithoutRetries: a topic whose store queue's policy makes
// no retry (so no retry tier) is kept all the same; no topic, no side.
func TestKafkaSideWithoutRetries(t *testing.T) {
	c, err := loadConfig(t, nil, "--kafka-brokers", "127.0.0.1:1", "--kafka-topics", "orders", "--retry-max-retries", "0")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	worker := redrive.NewWorker(client, redrive.WorkerOptions{Queues: c.Queues, Logger: slog.New(slog.DiscardHandler)})
	side, err := newKafkaSide(c, client, worker, slog.New(slog.DiscardHandler))
	if err != nil || side == nil {
		t.Fatalf("kafka side: %v", err)
	}
	side.stop()
	c.Kafka.Topics = nil
	if side, err := newKafkaSide(c, client, worker, slog.New(slog.DiscardHandler)); side != nil || err != nil {
		t.Errorf("no topic: %v %v, want no side", side, err)
	}
}
