package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// systemPython is Debian's Python, where Debian's python3-pika loads
// (the python3 first on PATH may be another one).
const systemPython = "/usr/bin/python3"

// pika checks that Debian's python3-pika is installed (.ci/run installs
// it); the test skips without it, and fails without it in CI.
func pika(t *testing.T) {
	t.Helper()
	if err := exec.Command(systemPython, "-c", "import pika").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import pika (%v): install Debian's python3-pika", systemPython, err)
		}
		t.Skipf("%s cannot import pika (%v): install Debian's python3-pika to run this test", systemPython, err)
	}
}

// delivery is one line of testdata/consumer.py's log.
type delivery struct {
	ID          string  `json:"id"`
	At          float64 `json:"at"`
	Action      string  `json:"action"`
	Body        string  `json:"body"`
	Attempt     any     `json:"attempt"`
	Redriven    any     `json:"redriven"`
	ContentType string  `json:"content_type"`
	Traceparent string  `json:"traceparent"`
}

// readDeliveries reads the Python consumer's log, by message id.
func readDeliveries(t *testing.T, path string) map[string][]delivery {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]delivery{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d delivery
		if json.Unmarshal(sc.Bytes(), &d) != nil {
			continue // a line being written
		}
		out[d.ID] = append(out[d.ID], d)
	}
	return out
}

func acked(ds []delivery) bool {
	for _, d := range ds {
		if d.Action == "ack" {
			return true
		}
	}
	return false
}

// TestServeManagesRabbitMQQueue is the managed-queue proof: a consumer
// written in Python with pika consumes a queue `redrive serve` manages,
// acks, rejects and reports failures through the failure exchange; serve
// is killed with SIGKILL in the middle and restarted. Every message ends
// acked or as a dead job in the store, as the script dictates, once; the
// gaps between deliveries follow the policy; bodies are kept byte-exact;
// and a dead message redriven from the API comes back to the Python
// consumer, which acks it, with both lives in the job's history.
func TestServeManagesRabbitMQQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	url := amqpTestURL(t)
	pika(t)
	bin := buildRedrive(t)
	ctx := context.Background()
	conn, err := amqp.Dial(ctx, url, amqp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := fmt.Sprintf("redrive-serve-test-%d", time.Now().UnixNano())
	exchange := q + "-failures"
	t.Cleanup(func() { deleteManaged(conn, q, exchange) })

	dir := t.TempDir()
	db := filepath.Join(dir, "redrive.db")
	const token = "managed-queue-token"
	args := []string{"--db", db, "--addr", "127.0.0.1:0", "--amqp-queues", q, "--amqp-failure-exchange", exchange,
		"--retry-base", "100ms", "--retry-max-retries", "3", "--retry-jitter", "none", "--queues", "default"}
	env := []string{"REDRIVE_TOKEN=" + token, "REDRIVE_AMQP_URL=" + url}
	s := startRedrive(t, bin, env, args...)
	s.token = token
	eventually(t, "serve declared the managed queue", func() bool { return queueExists(conn, q) && queueExists(conn, q+"-failed") })

	// The consumer, in Python.
	logPath := filepath.Join(dir, "deliveries.jsonl")
	py := exec.Command(systemPython, filepath.Join("testdata", "consumer.py"), url, q, exchange, logPath)
	var pyOut bytes.Buffer
	py.Stdout, py.Stderr = &pyOut, &pyOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		py.Process.Kill()
		py.Wait()
		if t.Failed() {
			t.Logf("consumer.py's output:\n%s", pyOut.String())
		}
	})

	bodies := map[string][]byte{
		"ok-1": []byte(`{"doc":1}`), "ok-2": []byte("plain text"), "ok-3": {0, 1, 2},
		"flaky-1": []byte(`{"doc":"flaky"}`), "flaky-2": []byte("again"),
		"dead-1": []byte("{\"doc\": 1}\n"), "dead-2": {0x00, 0xff, 0x10, 0x80, 'A'},
		"bad-1": []byte(`{"title":""}`), "limit-1": []byte(`{"doc":"limited"}`), "revive-1": []byte(`{"doc":"revive"}`),
	}
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for id, body := range bodies {
		ct := "application/json"
		if !json.Valid(body) {
			ct = "application/octet-stream"
		}
		if err := pub.Publish(ctx, "", q, amqp091.Publishing{MessageId: id, ContentType: ct, Body: body,
			DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"tenant": "acme"}}); err != nil {
			t.Fatal(err)
		}
	}

	// SIGKILL in the middle of the retries, then a restart on the same
	// database.
	eventually(t, "dead-1's second delivery", func() bool { return len(readDeliveries(t, logPath)["dead-1"]) >= 2 })
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s = startRedrive(t, bin, env, args...)
	s.token = token

	deadIDs := map[string]int64{}
	eventually(t, "every message acked or dead in the store", func() bool {
		ds := readDeliveries(t, logPath)
		for _, id := range []string{"ok-1", "ok-2", "ok-3", "flaky-1", "flaky-2", "limit-1"} {
			if !acked(ds[id]) {
				return false
			}
		}
		deadIDs = deadJobs(t, s, q)
		return len(deadIDs) >= 4
	})
	// No job dies twice: once no queue of q but its DLQ holds a message
	// (ready or unacknowledged), nothing more can die.
	waitUntil(t, 2*e2eWait, "every queue of "+q+" but the DLQ empty", func() error { return queuesHeld(url, q) })
	deadIDs = deadJobs(t, s, q)
	if fmt.Sprint(sortedKeys(deadIDs)) != "[bad-1 dead-1 dead-2 revive-1]" {
		t.Fatalf("dead jobs %v, want bad-1 dead-1 dead-2 revive-1, once each", sortedKeys(deadIDs))
	}
	ds := readDeliveries(t, logPath)
	for id, body := range bodies {
		for _, d := range ds[id] {
			if d.Body != hex.EncodeToString(body) {
				t.Errorf("%s delivered with body %s, want %x", id, d.Body, body)
			}
		}
	}
	if n := len(ds["flaky-1"]); n < 3 {
		t.Errorf("flaky-1: %d deliveries, want 3 (2 rejections, then the ack)", n)
	}
	if n := len(ds["bad-1"]); n != 1 {
		t.Errorf("bad-1: %d deliveries, want 1 (permanent: dead at once)", n)
	}
	// The gaps follow the policy (100, 200, 400 ms), never early. The
	// kill may make one longer, and may duplicate a retry (the router
	// published it, then died before acknowledging the failure): so each
	// delivery of attempt k is compared with the first delivery of
	// attempt k-1, by the attempt count the message carries.
	for _, id := range []string{"dead-1", "dead-2", "revive-1"} {
		first := map[int]float64{}
		for _, d := range ds[id] {
			n := 0
			if f, ok := d.Attempt.(float64); ok {
				n = int(f)
			}
			if at, ok := first[n]; !ok || d.At < at {
				first[n] = d.At
			}
		}
		if len(first) != 4 {
			t.Errorf("%s: deliveries of attempts %v, want 4 attempts (0 to 3 used before)", id, first)
			continue
		}
		for _, d := range ds[id] {
			n := 0
			if f, ok := d.Attempt.(float64); ok {
				n = int(f)
			}
			if n == 0 {
				continue
			}
			want := 100 * time.Millisecond << (n - 1)
			if gap := time.Duration((d.At - first[n-1]) * float64(time.Second)); gap < want-5*time.Millisecond {
				t.Errorf("%s: attempt %d came %v after attempt %d, early for %v", id, n+1, gap, n, want)
			}
		}
	}
	if l := ds["limit-1"]; len(l) >= 2 {
		if gap := time.Duration((l[1].At - l[0].At) * float64(time.Second)); gap < 300*time.Millisecond-5*time.Millisecond {
			t.Errorf("limit-1 came back %v after a Retry-After of 300ms", gap)
		}
	}

	// The dead jobs: history, reason, bodies byte-exact.
	for id, jobID := range deadIDs {
		j := getJob(t, s, jobID)
		var m amqp.Message
		if err := json.Unmarshal(j.Payload, &m); err != nil {
			t.Fatalf("%s: payload %s: %v", id, j.Payload, err)
		}
		if !bytes.Equal(m.Body, bodies[id]) || m.Queue != q || m.Headers["tenant"] != "acme" {
			t.Errorf("%s: stored body %q queue %q headers %v, want %q, %q, tenant acme", id, m.Body, m.Queue, m.Headers, bodies[id], q)
		}
		switch id {
		case "bad-1":
			if j.DeadReason != "permanent" || j.LastError != "invalid document: no title" || j.Attempt != 1 || len(j.History) != 1 {
				t.Errorf("bad-1: reason %q error %q attempt %d history %d", j.DeadReason, j.LastError, j.Attempt, len(j.History))
			}
		default:
			kinds := eventKinds(j.History)
			if j.DeadReason != "retries_exhausted" || j.Attempt != 4 || kinds != "retry retry retry dead" {
				t.Errorf("%s: reason %q attempt %d history %s, want retries_exhausted, 4, retry retry retry dead", id, j.DeadReason, j.Attempt, kinds)
			}
		}
	}
	if m := payloadMessage(t, getJob(t, s, deadIDs["dead-2"])); m.BodyEncoding != amqp.BodyBase64 {
		t.Errorf("the binary body is kept as %s, want base64", m.BodyEncoding)
	}

	checkManagedQueueViews(t, s, q)

	// Redrive revive-1 from the API: it is published back, the Python
	// consumer acks it, and its history shows both lives.
	code, body := s.api("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d],"note":"fixed the index"}`, deadIDs["revive-1"]))
	if code != 200 && code != 202 {
		t.Fatalf("redrive: %d %s", code, body)
	}
	eventually(t, "the redriven message acked by the Python consumer", func() bool {
		return acked(readDeliveries(t, logPath)["revive-1"])
	})
	eventually(t, "the redriven job completed", func() bool {
		return getJob(t, s, deadIDs["revive-1"]).State == redrive.Completed
	})
	j := getJob(t, s, deadIDs["revive-1"])
	if kinds := eventKinds(j.History); kinds != "retry retry retry dead redriven completed" {
		t.Errorf("revive-1's history: %s, want retry retry retry dead redriven completed", kinds)
	}
	last := readDeliveries(t, logPath)["revive-1"]
	if d := last[len(last)-1]; d.Body != hex.EncodeToString(bodies["revive-1"]) || fmt.Sprint(d.Redriven) != "1" || d.Attempt != nil {
		t.Errorf("redriven delivery: body %s redriven %v attempt %v, want the body, redriven 1, no attempt", d.Body, d.Redriven, d.Attempt)
	}
}

// checkManagedQueueViews: the API and /metrics show the managed queue.
func checkManagedQueueViews(t *testing.T, s *redriveProc, q string) {
	t.Helper()
	code, body := s.api("GET", "/v1/amqp/queues", "")
	if code != 200 {
		t.Fatalf("GET /v1/amqp/queues: %d %s", code, body)
	}
	var res struct {
		Queues []struct {
			Queue       string            `json:"queue"`
			DeadLetters string            `json:"dead_letters"`
			Queues      []amqp.QueueDepth `json:"queues"`
			Router      amqp.RouterStats  `json:"router"`
			Keeper      *amqp.KeeperStats `json:"keeper"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Queues) != 1 || res.Queues[0].Queue != q || res.Queues[0].DeadLetters != "store" || res.Queues[0].Keeper == nil {
		t.Fatalf("managed queues: %s", body)
	}
	mq := res.Queues[0]
	roles := map[string]int{}
	for _, d := range mq.Queues {
		roles[d.Role]++
		if d.Role == "work" && d.Consumers != 1 {
			t.Errorf("work queue: %d consumers, want the Python one", d.Consumers)
		}
	}
	if roles["work"] != 1 || roles["failed"] != 1 || roles["dlq"] != 1 || roles["tier"] < 3 {
		t.Errorf("queues by role %v", roles)
	}
	// The totals are the restarted process's: the retries after the kill.
	if mq.Router.Failures == 0 || mq.Router.Retried == 0 || mq.Router.Dead == 0 {
		t.Errorf("router totals %+v", mq.Router)
	}
	code, body = s.api("GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{`redrive_amqp_up{queue="` + q + `"} 1`, `redrive_amqp_queue_consumers{broker_queue="` + q + `",queue="` + q + `",role="work"} 1`,
		`redrive_amqp_dead_total{queue="` + q + `"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// deleteManaged deletes a managed queue's queues and its failure
// exchange.
func deleteManaged(conn *amqp.Conn, q, exchange string) {
	ch, err := conn.Channel(context.Background())
	if err != nil {
		return
	}
	defer ch.Close()
	topo := amqp.NewTopology(q, mustPolicy(100*time.Millisecond))
	topo.FailureExchange = exchange
	for _, n := range append([]string{q, topo.DLQ(), topo.FailedQueue()}, tierNames(topo)...) {
		ch.QueueDelete(n, false, false, false)
	}
	ch.ExchangeDelete(exchange, false, false)
}

func tierNames(t amqp.Topology) []string {
	var out []string
	for _, d := range t.Tiers {
		out = append(out, t.TierQueue(d))
	}
	return out
}

// queuesHeld returns an error naming the queues of the managed queue q
// (those whose name starts with q), its DLQ aside, that hold a message,
// ready or unacknowledged, on the broker at url, as rabbitmqctl counts
// them; nil when none does.
func queuesHeld(url, q string) error {
	vhost := "/"
	if u, err := neturl.Parse(url); err == nil && len(u.Path) > 1 {
		vhost = u.Path[1:]
	}
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "-p", vhost, "--no-table-headers", "name", "messages").CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	var held []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], q) && f[0] != q+"-dlq" && f[1] != "0" {
			held = append(held, f[0]+": "+f[1])
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("messages held: %s", strings.Join(held, ", "))
	}
	return nil
}

// queueExists reports whether the broker has the queue.
func queueExists(conn *amqp.Conn, name string) bool {
	ch, err := conn.Channel(context.Background())
	if err != nil {
		return false
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return err == nil
}

// deadJobs returns the dead jobs of the store queue q by message id.
func deadJobs(t *testing.T, s *redriveProc, q string) map[string]int64 {
	t.Helper()
	code, body := s.api("GET", "/v1/dlq?limit=100&queue="+q, "")
	if code != 200 {
		t.Fatalf("GET /v1/dlq: %d %s", code, body)
	}
	var res struct {
		Jobs []*redrive.Job `json:"jobs"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var mu sync.Mutex
	for _, j := range res.Jobs {
		m := payloadMessage(t, j)
		mu.Lock()
		if _, dup := out[m.MessageID]; dup {
			t.Errorf("message %s is dead twice in the store", m.MessageID)
		}
		out[m.MessageID] = j.ID
		mu.Unlock()
	}
	return out
}

func payloadMessage(t *testing.T, j *redrive.Job) amqp.Message {
	t.Helper()
	var m amqp.Message
	if err := json.Unmarshal(j.Payload, &m); err != nil {
		t.Fatalf("job %d: payload %s: %v", j.ID, j.Payload, err)
	}
	return m
}

func getJob(t *testing.T, s *redriveProc, id int64) *redrive.Job {
	t.Helper()
	code, body := s.api("GET", fmt.Sprintf("/v1/jobs/%d", id), "")
	if code != 200 {
		t.Fatalf("GET job %d: %d %s", id, code, body)
	}
	var j redrive.Job
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func eventKinds(h []redrive.Event) string {
	var ks []string
	for _, e := range h {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, " ")
}

func sortedKeys(m map[string]int64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// mustPolicy is serve's policy in the test: 3 retries from base, doubling.
func mustPolicy(base time.Duration) retry.Policy {
	return retry.Policy{MaxRetries: 3, Initial: base, Multiplier: 2, MaxDelay: 30 * time.Second, Jitter: retry.JitterNone}
}
