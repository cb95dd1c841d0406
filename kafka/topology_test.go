package kafka_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestTopology: the default policy's tiers and names; a consumer told not
// to create topics names the missing ones; allowed, it creates the tiers
// and the DLT with the main topic's partition count.
func TestTopology(t *testing.T) {
	t.Parallel()
	topo := kafka.NewTopology("scans", retry.DefaultPolicy())
	if got := strings.Join(topo.Topics(), " "); got != "scans scans-retry-1s scans-retry-2s scans-retry-4s scans-retry-40s scans-retry-400s scans-dlt" {
		t.Errorf("topics %s", got)
	}
	if got := topo.TierTopic(1500 * time.Millisecond); got != "scans-retry-1500ms" {
		t.Errorf("tier name %s", got)
	}
	for _, bad := range []string{"", "a b", "ünicode", strings.Repeat("x", 230)} {
		if err := (kafka.Topology{Topic: bad, Tiers: []time.Duration{time.Second}}).Validate(); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}

	c := newCluster(t)
	topic := newTopic(t)
	// kadm answers ListTopics from metadata up to MetadataMinAge old (5 s
	// by default): a topic listed as unknown before the consumer created
	// it would stay unknown that long.
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(50*time.Millisecond)))
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	opts := kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", NoCreateTopics: true,
		Topics: map[string]kafka.TopicOptions{topic: {}}, Executor: redrive.ExecutorOptions{Logger: testLogger(t)}}
	cons, err := kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = cons.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), topic+"-retry-1s") || !strings.Contains(err.Error(), topic+"-dlt") ||
		!strings.Contains(err.Error(), "do not exist") {
		t.Fatalf("Run without creating: %v, want the missing topics named", err)
	}
	opts.NoCreateTopics = false
	cons, err = kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	cons.HandleFunc("probe", func(context.Context, *redrive.Job) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	})
	stop := running(t, cons)
	ctopo, _ := cons.Topology(topic)
	eventually(t, "the topics created", 60*time.Second, func() bool {
		d, err := adm.ListTopics(context.Background(), ctopo.Topics()...)
		if err != nil {
			return false
		}
		for _, name := range ctopo.Topics() {
			if td, ok := d[name]; !ok || td.Err != nil || len(td.Partitions) != 3 {
				return false
			}
		}
		return true
	})
	// Stopped once it consumes (its topics ensured), not while it waits
	// for the new topics' leaders.
	r, err := kafka.NewRecord(topic, "probe", map[string]int{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.produce(t, c.client(t), r)
	select {
	case <-handled:
	case <-time.After(2 * time.Minute):
		t.Fatal("the probe record was not handled")
	}
	stop()
}

// TestTopologyCreateTimedOut: a broker that answers the creation of the
// topics with REQUEST_TIMED_OUT (a loaded one does when the creation
// outlasts the request's timeout, and goes on creating) is asked again:
// Ensure returns once the topics exist, instead of failing the
// consumer's start (topic creation took a minute on a loaded broker).
func TestTopologyCreateTimedOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(50*time.Millisecond)))
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	c.fake.ControlKey(int16(kmsg.CreateTopics), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.CreateTopicsRequest)
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.RequestTimedOut.Code
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1) // once: the control ends after this answer
		return resp, nil, true
	})
	topo := kafka.NewTopology(topic, retry.DefaultPolicy())
	if err := topo.Ensure(context.Background(), adm, true); err != nil {
		t.Fatalf("Ensure after a timed-out creation: %v", err)
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("%d creations refused, want 1", n)
	}
	// A client of its own: adm's metadata still knows them missing.
	d, err := kadm.NewClient(c.client(t)).ListTopics(context.Background(), topo.Topics()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topo.Topics() {
		if td, ok := d[name]; !ok || td.Err != nil || len(td.Partitions) != 3 {
			t.Errorf("topic %s after Ensure: %+v", name, td)
		}
	}
}

// TestTopologyWaitsForLeaders: Ensure returns only once the topics it
// created list a leader for every partition. A broker elects a new
// topic's leaders a moment after CreateTopics answers; a consumer that
// started at once produced its first retries to, and fetched them from,
// leaderless partitions, and waited for franz-go's next metadata refresh
// (its first retry of a fresh deployment ran 4.7 s late).
func TestTopologyWaitsForLeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(10*time.Millisecond)))
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	topo := kafka.NewTopology(topic, retry.DefaultPolicy())
	var created, leaderless, listedAfter atomic.Int32
	c.fake.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		created.Add(1)
		return nil, nil, false // observed; the cluster creates them
	})
	host, port, _ := strings.Cut(c.brokers[0], ":")
	var portN int32
	for _, ch := range port {
		portN = portN*10 + ch - '0'
	}
	c.fake.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		req := kr.(*kmsg.MetadataRequest)
		if created.Load() == 0 || len(req.Topics) == 0 {
			return nil, nil, false
		}
		if leaderless.Load() >= 2 {
			listedAfter.Add(1)
			return nil, nil, false
		}
		leaderless.Add(1)
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, portN
		resp.Brokers = append(resp.Brokers, b)
		for _, rt := range req.Topics {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic = rt.Topic
			for p := range int32(3) {
				sp := kmsg.NewMetadataResponseTopicPartition()
				sp.Partition, sp.Leader = p, -1
				sp.ErrorCode = kerr.LeaderNotAvailable.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if err := topo.Ensure(context.Background(), adm, true); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if created.Load() == 0 {
		t.Fatal("Ensure created no topic")
	}
	if leaderless.Load() < 2 || listedAfter.Load() == 0 {
		t.Errorf("Ensure returned after %d leaderless listings and %d with leaders: it did not wait for the created topics' leaders",
			leaderless.Load(), listedAfter.Load())
	}
}
