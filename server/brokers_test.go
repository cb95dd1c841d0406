package server

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// The RabbitMQ tests run against the broker of REDRIVE_AMQP_URL (e.g.
// amqp://guest:guest@127.0.0.1:5672/). They skip without it, and fail
// without it in CI (CI set).
const amqpURLEnv = "REDRIVE_AMQP_URL"

func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(amqpURLEnv)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI: the RabbitMQ tests must run there, not skip", amqpURLEnv)
		}
		t.Skipf("%s is not set: set it to a RabbitMQ URL (amqp://guest:guest@127.0.0.1:5672/) to run the RabbitMQ tests", amqpURLEnv)
	}
	return u
}

// testBrokers is a Brokers over a real Router and Keeper, as serve's: the
// router's topologies with the broker's depths, its stats and the
// keeper's.
type testBrokers struct {
	conn   *amqp.Conn
	router *amqp.Router
	keeper *amqp.Keeper
	broker string
}

func (b *testBrokers) ManagedQueues(ctx context.Context) []amqp.ManagedQueue {
	stats := b.router.Stats()
	kept := b.keeper.Stats()
	var out []amqp.ManagedQueue
	for _, topo := range b.router.Topologies() {
		mq := amqp.ManagedQueue{Queue: topo.Queue, Broker: b.broker, FailureExchange: topo.FailureExchange, DeadLetters: "store",
			Router: stats[topo.Queue]}
		if k, ok := kept[topo.Queue]; ok {
			mq.Keeper = &k
		}
		depths, err := topo.Depths(ctx, b.conn)
		if err != nil {
			mq.Error = err.Error()
		}
		mq.Queues = depths
		out = append(out, mq)
	}
	return out
}

var managedSeq atomic.Int64

// startManaged runs, until the end of the test, a Router and a Keeper of
// one fresh managed queue (deleted at the end, with its failure exchange)
// on the broker, whose retries follow p and whose dead letters the keeper
// stores through client; it fills b.
func startManaged(t *testing.T, b *testBrokers, client *redrive.Client, p retry.Policy) amqp.Topology {
	t.Helper()
	url := brokerURL(t)
	conn, err := amqp.Dial(context.Background(), url, amqp.ConnOptions{Logger: quiet, Name: "redrive-test " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	queue := fmt.Sprintf("redrive-test-%d-%d-%s", os.Getpid(), managedSeq.Add(1), t.Name())
	exchange := "redrive-test-failures-" + queue
	router, err := amqp.NewRouter(conn, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{queue: {}}, FailureExchange: exchange,
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: quiet, DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	topo := router.Topologies()[0]
	// Deleted once the router and the keeper stopped (cleanups run last
	// registered first): running, they would declare them again.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names := []string{topo.Queue, topo.DLQ(), topo.FailedQueue()}
		for _, d := range topo.Tiers {
			names = append(names, topo.TierQueue(d))
		}
		for _, n := range names {
			if ch, err := conn.Channel(ctx); err == nil {
				_, _ = ch.QueueDelete(n, false, false, false)
				ch.Close()
			}
		}
		if ch, err := conn.Channel(ctx); err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
			ch.Close()
		}
	})
	if err := router.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	keeper, err := amqp.NewKeeper(conn, amqp.KeeperOptions{Topologies: router.Topologies(), Add: client.AddDead, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	*b = testBrokers{conn: conn, router: router, keeper: keeper, broker: amqp.Redact(url)}
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
	run("router", router.Run)
	run("keeper", keeper.Run)
	return topo
}

// plainConsumer consumes queue with the broker's plain protocol, as a
// consumer in another language does: it acknowledges a delivery when
// accept holds, else rejects it without requeue (a failed attempt, which
// the router retries). It sends the body of each acknowledged delivery on
// the channel it returns.
func plainConsumer(t *testing.T, conn *amqp.Conn, queue string, accept *atomic.Bool) <-chan []byte {
	t.Helper()
	ch, err := conn.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan []byte, 16)
	go func() {
		for d := range deliveries {
			if accept.Load() {
				_ = d.Ack(false)
				acked <- d.Body
			} else {
				_ = d.Reject(false)
			}
		}
	}()
	return acked
}

// publish publishes a message to queue through the default exchange,
// confirmed.
func publish(t *testing.T, conn *amqp.Conn, queue string, msg amqp091.Publishing) {
	t.Helper()
	p, err := amqp.NewPublisher(conn, amqp.PublisherOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(context.Background(), "", queue, msg); err != nil {
		t.Fatal(err)
	}
}

// waitDead waits until the store holds a dead job in queue and returns
// it.
func waitDead(t *testing.T, client *redrive.Client, queue string) *redrive.Job {
	t.Helper()
	var dead *redrive.Job
	testwait.Until(t, "the keeper to store a dead letter of queue "+queue, 30*time.Second, func() bool {
		res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: queue}, redrive.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) > 0 {
			dead = res.Jobs[0]
		}
		return dead != nil
	})
	return dead
}

// managedQueues asks GET /v1/amqp/queues.
func (e *env) managedQueues() ManagedQueueList {
	e.t.Helper()
	var l ManagedQueueList
	e.want(e.do("GET", "/v1/amqp/queues", ""), 200, &l)
	return l
}

// TestManagedQueuesAPI runs a managed queue on the real broker with a
// consumer that rejects a message until it dies, and checks what GET
// /v1/amqp/queues says before and after: the topology's queues with the
// broker's depths and consumers, the router's and the keeper's totals.
func TestManagedQueuesAPI(t *testing.T) {
	b := &testBrokers{}
	e := newEnv(t, Options{Token: "t", Brokers: b})
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	topo := startManaged(t, b, e.client, p)

	// Authenticated like every /v1 route.
	wantErr(t, e.do("GET", "/v1/amqp/queues", "", "Authorization", ""), 401, "unauthorized", "")
	wantErr(t, e.do("GET", "/v1/amqp/queues?queue=x", ""), 400, "invalid", "queue")

	var accept atomic.Bool
	plainConsumer(t, b.conn, topo.Queue, &accept)
	// Consumers as the broker counts them: the plain consumer on the
	// work queue, the router on the failure queue, the keeper on the DLQ.
	consumers := func(l ManagedQueueList) map[string]int {
		out := map[string]int{}
		if len(l.Queues) == 1 {
			for _, d := range l.Queues[0].Queues {
				out[d.Role] += d.Consumers
			}
		}
		return out
	}
	var l ManagedQueueList
	testwait.Watch(t, "a consumer on the work, failed and dlq queues", 10*time.Second, func() (bool, string) {
		l = e.managedQueues()
		c := consumers(l)
		return c["work"] == 1 && c["failed"] == 1 && c["dlq"] == 1, fmt.Sprintf("%+v", l)
	})
	mq := l.Queues[0]
	if mq.Queue != topo.Queue || mq.FailureExchange != topo.FailureExchange || mq.DeadLetters != "store" || mq.Error != "" ||
		mq.Broker != amqp.Redact(brokerURL(t)) || mq.Keeper == nil {
		t.Errorf("managed queue %+v", mq)
	}
	want := []amqp.QueueDepth{{Name: topo.Queue, Role: "work", Consumers: 1}, {Name: topo.DLQ(), Role: "dlq", Consumers: 1},
		{Name: topo.FailedQueue(), Role: "failed", Consumers: 1}}
	for _, d := range topo.Tiers {
		want = append(want, amqp.QueueDepth{Name: topo.TierQueue(d), Role: "tier", Delay: store.Duration(d)})
	}
	if len(topo.Tiers) < 2 || topo.Tiers[0] != 10*time.Millisecond || topo.Tiers[1] != 20*time.Millisecond {
		t.Errorf("tiers %v, want 10ms and 20ms first", topo.Tiers)
	}
	if fmt.Sprint(mq.Queues) != fmt.Sprint(want) {
		t.Errorf("queues\n%+v\nwant\n%+v", mq.Queues, want)
	}

	publish(t, b.conn, topo.Queue, amqp091.Publishing{MessageId: "doomed", ContentType: "text/plain", Body: []byte("hello")})
	j := waitDead(t, e.client, topo.Queue)
	if j.Kind != amqp.Kind || j.Attempt != 3 || j.DeadReason != "retries_exhausted" {
		t.Errorf("dead job: kind %q attempt %d reason %q, want amqp, 3, retries_exhausted", j.Kind, j.Attempt, j.DeadReason)
	}
	// The keeper counts a dead letter, and acknowledges its message, once
	// the store has it: the dead job can be seen a moment before.
	testwait.Watch(t, "the keeper's count and every queue settled", 10*time.Second, func() (bool, string) {
		mq = e.managedQueues().Queues[0]
		if mq.Keeper == nil || mq.Keeper.Kept == 0 {
			return false, fmt.Sprintf("keeper %+v", mq.Keeper)
		}
		for _, d := range mq.Queues {
			if d.Messages != 0 {
				return false, fmt.Sprintf("queue %s: %d messages", d.Name, d.Messages)
			}
		}
		return true, ""
	})
	if r := mq.Router; r.Failures != 3 || r.Retried != 2 || r.Dead != 1 || r.Returned != 2 {
		t.Errorf("router stats %+v, want 3 failures, 2 retried, 2 returned, 1 dead", r)
	}
	if k := mq.Keeper; k == nil || k.Kept != 1 || k.Duplicates != 0 {
		t.Errorf("keeper stats %+v, want 1 kept", k)
	}
	for _, d := range mq.Queues {
		if d.Messages != 0 || d.Missing {
			t.Errorf("queue %s: %d messages (missing %v), want none: every message was settled", d.Name, d.Messages, d.Missing)
		}
	}

	// The JSON as documented: durations of delay queues in nanoseconds,
	// the keeper's totals, no error.
	r := e.do("GET", "/v1/amqp/queues", "")
	var raw struct {
		Queues []map[string]json.RawMessage `json:"queues"`
	}
	r.json(t, &raw)
	if len(raw.Queues) != 1 {
		t.Fatalf("body %s", r.body)
	}
	for _, k := range []string{"queue", "broker", "failure_exchange", "dead_letters", "queues", "router", "keeper"} {
		if _, ok := raw.Queues[0][k]; !ok {
			t.Errorf("the answer lacks %q: %s", k, r.body)
		}
	}
	if _, ok := raw.Queues[0]["error"]; ok {
		t.Errorf("the answer has an error: %s", r.body)
	}
	if !strings.Contains(string(raw.Queues[0]["queues"]), fmt.Sprintf(`"name":%q,"role":"tier","delay":10,`, topo.TierQueue(10*time.Millisecond))) {
		t.Errorf("the 10ms delay queue is not as documented: %s", raw.Queues[0]["queues"])
	}
}

// fixedBrokers is a Brokers over a fixed list.
type fixedBrokers []amqp.ManagedQueue

func (f fixedBrokers) ManagedQueues(context.Context) []amqp.ManagedQueue { return f }

// TestManagedQueuesNone checks the answers without managed queues, and
// that a broker that could not be asked is reported, with a 200.
func TestManagedQueuesNone(t *testing.T) {
	e := newEnv(t, Options{})
	r := e.do("GET", "/v1/amqp/queues", "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"queues":[]}` {
		t.Errorf("without Brokers: %d %s, want 200 {\"queues\":[]}", r.status, r.body)
	}
	e = newEnv(t, Options{Brokers: fixedBrokers{}})
	if r := e.do("GET", "/v1/amqp/queues", ""); strings.TrimSpace(string(r.body)) != `{"queues":[]}` {
		t.Errorf("no managed queue: %d %s", r.status, r.body)
	}
	e = newEnv(t, Options{Brokers: fixedBrokers{{Queue: "orders", DeadLetters: "broker", Error: "connection refused"}}})
	r = e.do("GET", "/v1/amqp/queues", "")
	if r.status != 200 || !strings.Contains(string(r.body), `"queues":[],`) || !strings.Contains(string(r.body), `"error":"connection refused"`) ||
		strings.Contains(string(r.body), `"keeper"`) {
		t.Errorf("unreachable broker: %d %s, want its error, an empty list of queues and no keeper", r.status, r.body)
	}
	wantErr(t, e.do("POST", "/v1/amqp/queues", "{}"), 405, "method_not_allowed", "")
}

// healthBrokers is a Brokers whose connection state is set by the test.
type healthBrokers struct {
	fixedBrokers
	states []amqp.ConnState
}

func (h healthBrokers) Connections() []amqp.ConnState { return h.states }

// TestReadyzBrokers: /readyz says whether serve's broker connections are
// up, without where they are or their errors, and stays 200 while one is
// away (the API and the store still work; serve reconnects by itself).
func TestReadyzBrokers(t *testing.T) {
	e := newEnv(t, Options{})
	if r := e.do("GET", "/readyz", ""); r.status != 200 || strings.TrimSpace(string(r.body)) != `{"status":"ready"}` {
		t.Errorf("no brokers: %d %s", r.status, r.body)
	}
	up := amqp.ConnState{Broker: "amqp://rabbit.internal:5672/", Connected: true, Reconnects: 2}
	down := amqp.ConnState{Broker: "amqp://rabbit.internal:5672/", Reconnects: 3, Error: "dial tcp 10.0.0.7:5672: refused"}
	for _, c := range []struct {
		state amqp.ConnState
		want  string
	}{
		{up, `{"status":"ready","brokers":[{"kind":"amqp","connected":true,"reconnects":2}]}`},
		{down, `{"status":"degraded","brokers":[{"kind":"amqp","connected":false,"reconnects":3}]}`},
	} {
		e := newEnv(t, Options{Brokers: healthBrokers{states: []amqp.ConnState{c.state}}})
		r := e.do("GET", "/readyz", "")
		if r.status != 200 || strings.TrimSpace(string(r.body)) != c.want {
			t.Errorf("broker %+v: %d %s, want 200 %s", c.state, r.status, r.body, c.want)
		}
		if strings.Contains(string(r.body), "rabbit.internal") || strings.Contains(string(r.body), "10.0.0.7") {
			t.Errorf("/readyz, open to anyone, names the broker: %s", r.body)
		}
	}
}
