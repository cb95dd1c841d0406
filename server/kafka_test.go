package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// testKafka is a KafkaTopics over a real Keeper on an in-process cluster
// (kfake), as serve's: the keeper's Status, with the consumers' group.
type testKafka struct {
	brokers []string
	cl      *kgo.Client
	keeper  *kafka.Keeper
	group   string
	// mode is the consumer's delivery mode.
	mode kafka.Mode
	// completed counts the records the consumer's handler completed.
	completed atomic.Int64
}

func (k *testKafka) KafkaTopics(ctx context.Context) []kafka.ManagedTopic {
	return k.keeper.Status(ctx, kadm.NewClient(k.cl), k.group)
}

var kafkaSeq atomic.Int64

// startKafka starts, until the end of the test, a kfake cluster, a
// kafka.Consumer of one fresh topic whose retries follow p and whose
// handler of kind "scan" fails while fail holds, and a Keeper of the
// topic's DLT that stores through client; it fills k and returns the
// topic's topology.
func startKafka(t *testing.T, k *testKafka, client *redrive.Client, p retry.Policy, fail *atomic.Bool) kafka.Topology {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	topic := fmt.Sprintf("redrive-test-%d-%s", kafkaSeq.Add(1), t.Name())
	group := topic + "-consumers"
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: group, Mode: k.mode,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: quiet, DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		if fail.Load() {
			return errors.New("scanner unavailable")
		}
		k.completed.Add(1)
		return nil
	})
	topo, _ := cons.Topology(topic)
	keeper, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: brokers, Topologies: []kafka.Topology{topo}, Add: client.AddDead,
		Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	k.brokers, k.cl, k.keeper, k.group = brokers, cl, keeper, group
	run := func(what string, fn func(context.Context) error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- fn(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	run("consumer", cons.Run)
	run("keeper", keeper.Run)
	return topo
}

// produce produces a record of kind "scan" to topic.
func (k *testKafka) produce(t *testing.T, topic string, key, value []byte) {
	t.Helper()
	r := &kgo.Record{Topic: topic, Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("scan")},
		{Key: "tenant", Value: []byte("acme")}}}
	if err := k.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// kafkaTopics asks GET /v1/kafka/topics.
func (e *env) kafkaTopics() KafkaTopicList {
	e.t.Helper()
	var l KafkaTopicList
	e.want(e.do("GET", "/v1/kafka/topics", ""), 200, &l)
	return l
}

// TestKafkaTopicsAPI runs a consumer on kfake whose record fails until it
// dies, the keeper storing its dead letter, and checks what GET
// /v1/kafka/topics says: the topology's topics with their records, the
// consumers' and the keeper's lag, the keeper's totals.
func TestKafkaTopicsAPI(t *testing.T) {
	k := &testKafka{}
	e := newEnv(t, Options{Token: "t", Kafka: k})
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	var fail atomic.Bool
	fail.Store(true)
	topo := startKafka(t, k, e.client, p, &fail)

	// Authenticated like every /v1 route.
	wantErr(t, e.do("GET", "/v1/kafka/topics", "", "Authorization", ""), 401, "unauthorized", "")
	wantErr(t, e.do("GET", "/v1/kafka/topics?topic=x", ""), 400, "invalid", "topic")
	wantErr(t, e.do("POST", "/v1/kafka/topics", "{}"), 405, "method_not_allowed", "")

	k.produce(t, topo.Topic, []byte("doomed"), []byte{0x00, 0xff})
	j := waitDead(t, e.client, topo.Topic)
	if j.Kind != kafka.Kind || j.Attempt != 3 || j.DeadReason != "retries_exhausted" {
		t.Errorf("dead job: kind %q attempt %d reason %q, want kafka, 3, retries_exhausted", j.Kind, j.Attempt, j.DeadReason)
	}
	var l KafkaTopicList
	testwait.Watch(t, "the keeper's lag on the DLT to reach 0", 20*time.Second, func() (bool, string) {
		l = e.kafkaTopics()
		return len(l.Topics) == 1 && l.Topics[0].DLT.Lag != nil && *l.Topics[0].DLT.Lag == 0, fmt.Sprintf("%+v", l)
	})
	kt := l.Topics[0]
	if kt.Topic != topo.Topic || kt.Group != k.group || kt.Error != "" || strings.Join(kt.Brokers, ",") != strings.Join(k.brokers, ",") ||
		kt.Keeper == nil || kt.Keeper.Kept != 1 || kt.Keeper.Duplicates != 0 {
		t.Errorf("kafka topic %+v keeper %+v", kt, kt.Keeper)
	}
	if kt.Main.Topic != topo.Topic || kt.Main.Offsets != 1 || kt.Main.Records != nil || kt.Main.Partitions != 1 || kt.Main.Lag == nil || kt.Main.LagGroup != k.group {
		t.Errorf("main %+v", kt.Main)
	}
	if kt.DLT.Topic != topo.DLT() || kt.DLT.Records == nil || *kt.DLT.Records != 1 || kt.DLT.Offsets != 1 || kt.DLT.LagGroup != kafka.DefaultKeeperGroup {
		t.Errorf("dlt %+v", kt.DLT)
	}
	// The tiers of 10ms and 20ms took one retry each.
	if len(kt.Tiers) != len(topo.Tiers) || kt.Tiers[0].Topic != topo.TierTopic(10*time.Millisecond) || kt.Tiers[0].Offsets != 1 ||
		kt.Tiers[1].Topic != topo.TierTopic(20*time.Millisecond) || kt.Tiers[1].Offsets != 1 || kt.Tiers[2].Offsets != 0 {
		t.Errorf("tiers %+v, want %v", kt.Tiers, topo.Tiers)
	}

	// The JSON as documented: delays in milliseconds, counts, the keeper's
	// totals, no error.
	r := e.do("GET", "/v1/kafka/topics", "")
	var raw struct {
		Topics []map[string]json.RawMessage `json:"topics"`
	}
	r.json(t, &raw)
	if len(raw.Topics) != 1 {
		t.Fatalf("body %s", r.body)
	}
	for _, key := range []string{"topic", "group", "main", "tiers", "dlt", "brokers", "keeper"} {
		if _, ok := raw.Topics[0][key]; !ok {
			t.Errorf("the answer lacks %q: %s", key, r.body)
		}
	}
	if _, ok := raw.Topics[0]["error"]; ok {
		t.Errorf("the answer has an error: %s", r.body)
	}
	var tiers []map[string]any
	if err := json.Unmarshal(raw.Topics[0]["tiers"], &tiers); err != nil || len(tiers) == 0 {
		t.Fatalf("tiers %s: %v", raw.Topics[0]["tiers"], err)
	}
	if tier := tiers[0]; tier["topic"] != topo.TierTopic(10*time.Millisecond) || tier["partitions"] != 1.0 || tier["offsets"] != 1.0 || tier["records"] != nil ||
		tier["delay"] != 10.0 || tier["lag_group"] != k.group {
		t.Errorf("the 10ms tier is not as documented: %v", tier)
	}
}

// fixedTopics is a KafkaTopics over a fixed list.
type fixedTopics []kafka.ManagedTopic

func (f fixedTopics) KafkaTopics(context.Context) []kafka.ManagedTopic { return f }

// TestKafkaTopicsNone checks the answers without kept topics, and that a
// cluster that could not be asked is reported, with a 200.
func TestKafkaTopicsNone(t *testing.T) {
	e := newEnv(t, Options{})
	r := e.do("GET", "/v1/kafka/topics", "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"topics":[]}` {
		t.Errorf("without Kafka: %d %s, want 200 {\"topics\":[]}", r.status, r.body)
	}
	e = newEnv(t, Options{Kafka: fixedTopics{}})
	if r := e.do("GET", "/v1/kafka/topics", ""); strings.TrimSpace(string(r.body)) != `{"topics":[]}` {
		t.Errorf("no kept topic: %d %s", r.status, r.body)
	}
	e = newEnv(t, Options{Kafka: fixedTopics{{TopologyStats: kafka.TopologyStats{Topic: "orders"}, Error: "connection refused"}}})
	r = e.do("GET", "/v1/kafka/topics", "")
	if r.status != 200 || !strings.Contains(string(r.body), `"tiers":[],`) || !strings.Contains(string(r.body), `"brokers":[],`) ||
		!strings.Contains(string(r.body), `"error":"connection refused"`) || strings.Contains(string(r.body), `"keeper"`) {
		t.Errorf("unreachable cluster: %d %s, want its error, empty lists and no keeper", r.status, r.body)
	}
}

// TestKafkaTopicsUnreachable: a keeper whose brokers do not answer is
// reported in each topic's error, in time.
func TestKafkaTopicsUnreachable(t *testing.T) {
	add := func(context.Context, []store.DeadJob) ([]*store.Job, error) { return nil, errors.New("unused") }
	keeper, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: []string{"127.0.0.1:1"}, Add: add,
		Topologies: []kafka.Topology{kafka.NewTopology("orders", retry.DefaultPolicy())}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	got := keeper.Status(ctx, kadm.NewClient(cl), "g")
	if len(got) != 1 || got[0].Topic != "orders" || got[0].Error == "" || got[0].Tiers == nil || got[0].Keeper == nil {
		t.Errorf("status %+v", got)
	}
}
