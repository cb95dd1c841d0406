package amqp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// The tests run against the RabbitMQ of REDRIVE_AMQP_URL (e.g.
// amqp://guest:guest@127.0.0.1:5672/). They skip without it, and fail
// without it in CI (CI set).
const urlEnv = "REDRIVE_AMQP_URL"

func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI: the RabbitMQ tests must run there, not skip", urlEnv)
		}
		t.Skipf("%s is not set: set it to a RabbitMQ URL (amqp://guest:guest@127.0.0.1:5672/) to run the RabbitMQ tests", urlEnv)
	}
	return u
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger logs to the test's output when REDRIVE_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("REDRIVE_TEST_LOG") == "" {
		return quiet()
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// fastReconnect retries a lost connection every 100ms for a minute.
func fastReconnect() *retry.Policy {
	return &retry.Policy{MaxRetries: 600, Initial: 100 * time.Millisecond, Multiplier: 1, MaxDelay: 100 * time.Millisecond}
}

// dial connects to the broker (or to url, when given) and closes the
// connection at the end of the test.
func dial(t testing.TB, url ...string) *amqp.Conn {
	t.Helper()
	u := brokerURL(t)
	if len(url) > 0 {
		u = url[0]
	}
	c, err := amqp.Dial(context.Background(), u, amqp.ConnOptions{Reconnect: fastReconnect(), Logger: testLogger(t),
		Name: "redrive-test " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var queueSeq atomic.Int64

// newQueue returns a fresh queue name and deletes the queue, its DLQ and
// its delay queues at the end of the test.
func newQueue(t testing.TB, c *amqp.Conn, tiers ...time.Duration) string {
	t.Helper()
	name := fmt.Sprintf("redrive-test-%d-%d-%s", os.Getpid(), queueSeq.Add(1), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	if len(name) > 180 {
		name = name[:180]
	}
	t.Cleanup(func() { deleteTopology(c, name) })
	return name
}

// deleteTopology deletes a work queue's queues, the delay queues of the
// usual tiers included.
func deleteTopology(c *amqp.Conn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo := amqp.Topology{Queue: name}
	names := []string{name, topo.DLQ(), topo.FailedQueue()}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
		300 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 10 * time.Second, 40 * time.Second, 80 * time.Second, 100 * time.Second, 400 * time.Second,
		800 * time.Second, 1000 * time.Second} {
		names = append(names, topo.TierQueue(d))
	}
	for _, n := range names {
		ch, err := c.Channel(ctx)
		if err != nil {
			return
		}
		ch.QueueDelete(n, false, false, false)
		ch.Close()
	}
}

// depth returns the ready messages of a queue.
func depth(t testing.TB, c *amqp.Conn, name string) int {
	t.Helper()
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
	return q.Messages
}

// eventually polls cond until it holds, failing the test after a generous
// bound (a liveness guard, not a timing assertion).
func eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, within, cond)
}

// running runs a consumer until the end of the test, or until the stop
// function it returns is called, failing the test if Run returns an
// error.
func running(t testing.TB, c *amqp.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// requireSettled stops a consumer (what it held goes back to the broker)
// and fails t unless every queue of topo but the DLQ is then empty: no
// message is left that could run another attempt.
func requireSettled(t testing.TB, c *amqp.Conn, topo amqp.Topology, stop func()) {
	t.Helper()
	stop()
	depths, err := topo.Depths(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range depths {
		if d.Role != "dlq" && d.Messages != 0 {
			t.Fatalf("once the consumer stopped, queue %s (%s) holds %d message(s): another attempt could run", d.Name, d.Role, d.Messages)
		}
	}
}

// attempts records when each message's attempts started, by message id.
type attempts struct {
	mu sync.Mutex
	at map[string][]time.Time
	// acks and failures count the deliveries decided, by how: acked, or
	// rejected or reported (each one a failure sent to the router).
	acks, failures int
}

// decided records that a delivery was acked (ack) or failed.
func (a *attempts) decided(ack bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ack {
		a.acks++
	} else {
		a.failures++
	}
}

// counts returns the deliveries seen, and those acked and failed.
func (a *attempts) counts() (delivered, acks, failures int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, at := range a.at {
		delivered += len(at)
	}
	return delivered, a.acks, a.failures
}

func newAttempts() *attempts { return &attempts{at: map[string][]time.Time{}} }

// add records an attempt and returns its number among the recorded ones.
func (a *attempts) add(id string, t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[id] = append(a.at[id], t)
	return len(a.at[id])
}

func (a *attempts) of(id string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id]...)
}

// rabbitmqctl runs a rabbitmqctl command, failing the test if it fails.
func rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// publishRaw publishes a message with the low-level channel API,
// confirmed.
func publishRaw(t testing.TB, c *amqp.Conn, queue string, msg amqp091.Publishing) {
	t.Helper()
	p, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(context.Background(), "", queue, msg); err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
