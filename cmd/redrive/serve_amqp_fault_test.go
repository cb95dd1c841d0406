package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/stableport"
)

// rabbitNode is a RabbitMQ node of the test's own, on ports of its own, so
// that the test can stop and kill it while the shared broker of
// REDRIVE_AMQP_URL stays up for the other tests. It needs Debian's
// rabbitmq-server, run as root (the script then runs the node as the
// rabbitmq user).
type rabbitNode struct {
	t    *testing.T
	name string
	port string
	dir  string
	env  []string
}

func newRabbitNode(t *testing.T) *rabbitNode {
	t.Helper()
	if _, err := exec.LookPath("rabbitmq-server"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test starts a RabbitMQ node of its own: it needs rabbitmq-server (%v) and root (euid %d)", err, os.Geteuid())
		}
		t.Skipf("starts a RabbitMQ node of its own: needs Debian's rabbitmq-server and root")
	}
	// Not t.TempDir: its parents are private to root, and the node runs
	// as the rabbitmq user.
	dir, err := os.MkdirTemp("", "redrive-rabbit-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte("# a test node: defaults\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u, err := user.Lookup("rabbitmq"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, gid) })
	}
	// Ports below the ephemeral range: while the node is down between
	// restarts, another process's connection could be given a port from
	// net.Listen(":0"), and the node could not listen on it again.
	port, dist := strconv.Itoa(stableport.Pick(t)), strconv.Itoa(stableport.Pick(t))
	for dist == port {
		dist = strconv.Itoa(stableport.Pick(t))
	}
	n := &rabbitNode{t: t, name: "redrive-test-" + port + "@localhost", port: port, dir: dir}
	n.env = append(os.Environ(),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+port,
		"RABBITMQ_DIST_PORT="+dist,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"))
	// A watchdog in a session of its own kills the node and removes its
	// folder once this test binary has ended, its cleanups run or not
	// (go test's -timeout panics): the node is detached, nothing else
	// would stop it.
	wd := exec.Command("sh", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1; done
for i in 1 2 3 4 5 6 7 8 9 10; do [ -s "$2/pid" ] && break; sleep 1; done
[ ! -s "$2/pid" ] || kill -KILL "$(cat "$2/pid")" 2>/dev/null
rm -rf "$2"`, "rabbit-node-watchdog", strconv.Itoa(os.Getpid()), dir)
	wd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := wd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stop the node: `stop PIDFILE` waits until its VM has exited;
		// a SIGKILL (from the pid file: the node may not answer) if not.
		n.ctlErr("stop", filepath.Join(dir, "pid"))
		if pid, err := n.filePID(); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
			// Waits for the VM to go, at most 30 s.
			settles(30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
		}
		wd.Process.Kill()
		wd.Wait()
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					t.Logf("%s (last 3 KiB):\n%s", l, b[max(0, len(b)-3072):])
				}
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the node's folder: %v", err)
		}
	})
	n.start()
	return n
}

// TestRabbitNodeEndsWithItsTest: a test binary that ends without running
// its cleanups (go test's -timeout panics, a SIGKILL) does not leave its
// RabbitMQ node running: the node is detached, so nothing else would stop
// it.
func TestRabbitNodeEndsWithItsTest(t *testing.T) {
	const child = "REDRIVE_TEST_RABBIT_NODE_CHILD"
	if os.Getenv(child) != "" {
		n := newRabbitNode(t)
		fmt.Println("RABBIT_NODE_DIR=" + n.dir)
		os.Exit(3) // as a timeout's panic would: no cleanups
	}
	if testing.Short() {
		t.Skip("starts a RabbitMQ node")
	}
	if _, err := exec.LookPath("rabbitmq-server"); err != nil || os.Geteuid() != 0 {
		t.Skip("starts a RabbitMQ node of its own: needs Debian's rabbitmq-server and root")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRabbitNodeEndsWithItsTest$")
	cmd.Env = append(os.Environ(), child+"=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the child test: %v\n%s", err, out)
	}
	var dir string
	for _, line := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutPrefix(line, "RABBIT_NODE_DIR="); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("the child test printed no node folder:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatalf("the node's pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the node's pid file: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		os.RemoveAll(dir)
	})
	// A liveness bound, not a timing assertion.
	within(t, 2*time.Minute, "the node of a test binary that ended is gone", func() bool {
		return syscall.Kill(pid, 0) != nil
	})
}

func (n *rabbitNode) url() string { return "amqp://guest:guest@127.0.0.1:" + n.port + "/" }

// start starts the node and waits until it accepts connections.
func (n *rabbitNode) start() {
	n.t.Helper()
	t0 := time.Now()
	cmd := exec.Command("rabbitmq-server", "-detached")
	cmd.Env = n.env
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("rabbitmq-server -detached: %v\n%s", err, out)
	}
	// `wait` waits for the pid file, then for the node to start (a
	// detached node may not have registered its name yet, which
	// await_startup takes for "not running").
	if out, err := n.ctlErr("wait", "--timeout", "180", filepath.Join(n.dir, "pid")); err != nil {
		n.t.Fatalf("rabbitmqctl wait: %v\n%s", err, out)
	}
	n.waitPort(true)
	n.t.Logf("RabbitMQ node %s up in %v", n.name, time.Since(t0).Round(time.Millisecond))
}

func (n *rabbitNode) ctlErr(args ...string) (string, error) {
	cmd := exec.Command("rabbitmqctl", append([]string{"-n", n.name}, args...)...)
	cmd.Env = n.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *rabbitNode) ctl(args ...string) {
	n.t.Helper()
	if out, err := n.ctlErr(args...); err != nil {
		n.t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// pid is the node's OS process (the Erlang VM).
func (n *rabbitNode) pid() (int, error) {
	out, err := n.ctlErr("eval", "os:getpid().")
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	return strconv.Atoi(strings.Trim(strings.TrimSpace(out), `"`))
}

// filePID is the node's OS process as its pid file says.
func (n *rabbitNode) filePID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// kill SIGKILLs the node's VM, as a crash would, and waits until it is
// gone.
func (n *rabbitNode) kill() {
	n.t.Helper()
	pid, err := n.pid()
	if err != nil {
		n.t.Fatalf("the node's pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		n.t.Fatal(err)
	}
	n.waitPort(false)
	// The VM is gone once its pid is; its epmd entry goes with it.
	waitUntil(n.t, 3*time.Minute, "the RabbitMQ VM went", holds(func() bool { return syscall.Kill(pid, 0) != nil }))
}

// waitPort waits until the AMQP port accepts connections (open) or
// refuses them (!open).
func (n *rabbitNode) waitPort(open bool) {
	n.t.Helper()
	waitUntil(n.t, 3*time.Minute, fmt.Sprintf("port %s is open=%v", n.port, open), func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+n.port, time.Second)
		if c != nil {
			c.Close()
		}
		if (err == nil) == open {
			return nil
		}
		return fmt.Errorf("dial: %v", err)
	})
}

// readyState is serve's /readyz.
type readyState struct {
	Status  string `json:"status"`
	Brokers []struct {
		Kind       string `json:"kind"`
		Connected  bool   `json:"connected"`
		Reconnects int64  `json:"reconnects"`
	} `json:"brokers"`
}

func readyz(t *testing.T, s *redriveProc) readyState {
	t.Helper()
	code, body := s.api("GET", "/readyz", "")
	var r readyState
	if err := json.Unmarshal(body, &r); err != nil || code != 200 {
		t.Fatalf("GET /readyz: %d %s (%v)", code, body, err)
	}
	return r
}

// TestServeManagedQueueSurvivesBrokerRestarts: while the Python consumer
// works through 5,000 messages of a managed queue (acking most, rejecting
// a fifth twice, rejecting a twentieth until they die), the RabbitMQ node
// is stopped and started (rabbitmqctl stop_app / start_app), then
// SIGKILLed and started again. The same serve process reconnects each
// time, says so in its log and in /readyz, and in the end every message
// was acked or is dead in the store, none lost, none dead twice, none
// both.
func TestServeManagedQueueSurvivesBrokerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary, and a RabbitMQ node")
	}
	t.Parallel()
	amqpTestURL(t) // in CI, the broker tests must run
	pika(t)
	node := newRabbitNode(t)
	bin := buildRedrive(t)
	ctx := context.Background()
	brokerURL := node.url()
	conn, err := amqp.Dial(ctx, brokerURL, amqp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := "restarts"
	exchange := q + "-failures"

	dir := t.TempDir()
	const token = "broker-restart-token"
	args := []string{"--db", filepath.Join(dir, "redrive.db"), "--addr", "127.0.0.1:0", "--amqp-queues", q,
		"--amqp-failure-exchange", exchange, "--retry-base", "50ms", "--retry-max-retries", "2",
		"--retry-jitter", "none", "--queues", "default",
		// Half as many retries as messages in a burst: the budget would
		// spread them over minutes, which is not what this test is about.
		"--retry-budget=false"}
	s := startRedrive(t, bin, []string{"REDRIVE_TOKEN=" + token, "REDRIVE_AMQP_URL=" + brokerURL}, args...)
	s.token = token
	eventually(t, "serve declared the managed queue", func() bool { return queueExists(conn, q) })

	logPath := filepath.Join(dir, "deliveries.jsonl")
	// The gate holds the consumer (closed until every message is
	// published, and while each fault is made), so that each fault finds
	// thousands of messages still to deliver.
	gate := filepath.Join(dir, "gate")
	open := func() {
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hold := func() {
		if err := os.Remove(gate); err != nil {
			t.Fatal(err)
		}
	}
	py := exec.Command(systemPython, filepath.Join("testdata", "consumer.py"), brokerURL, q, exchange, logPath, gate)
	var pyOut strings.Builder
	py.Stdout, py.Stderr = &pyOut, &pyOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		py.Process.Kill()
		py.Wait()
		if t.Failed() {
			out := pyOut.String()
			t.Logf("consumer.py's output (last 3 KiB):\n%s", out[max(0, len(out)-3072):])
		}
	})

	const n = 5000
	ids := make([]string, n)
	wantDead := map[string]bool{}
	for i := range ids {
		switch {
		case i%20 == 0:
			ids[i] = fmt.Sprintf("dead-%04d", i)
			wantDead[ids[i]] = true
		case i%5 == 1:
			ids[i] = fmt.Sprintf("flaky-%04d", i)
		default:
			ids[i] = fmt.Sprintf("ok-%04d", i)
		}
	}
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, id := range ids {
		if err := pub.Publish(ctx, "", q, amqp091.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte(id),
			DeliveryMode: amqp091.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	open() // held while publishing: the faults must find messages queued
	deliveries := func() int {
		total := 0
		for _, ds := range readDeliveries(t, logPath) {
			total += len(ds)
		}
		return total
	}
	// About 7,500 deliveries in all (5,000 first ones, 2 more for each
	// flaky and dead message, more after the faults). The consumer is held
	// at 1,000 and at 1,000 after the first fault, while the broker goes.
	reconnected := func(min int64) func() bool {
		return func() bool {
			r := readyz(t, s)
			return r.Status == "ready" && len(r.Brokers) == 1 && r.Brokers[0].Connected && r.Brokers[0].Reconnects >= min
		}
	}
	degraded := func() bool {
		r := readyz(t, s)
		return r.Status == "degraded" && len(r.Brokers) == 1 && !r.Brokers[0].Connected
	}
	within(t, 3*time.Minute, "1,000 deliveries", func() bool { return deliveries() >= 1000 })
	hold()
	node.ctl("stop_app")
	t.Logf("stop_app at %d deliveries", deliveries())
	within(t, time.Minute, "/readyz says the broker is away", degraded)
	node.ctl("start_app")
	node.waitPort(true)
	within(t, 3*time.Minute, "serve reconnected after stop_app/start_app", reconnected(1))
	open()

	second := deliveries() + 1000
	within(t, 3*time.Minute, "1,000 more deliveries", func() bool { return deliveries() >= second })
	hold()
	node.kill()
	t.Logf("SIGKILL at %d deliveries", deliveries())
	within(t, time.Minute, "/readyz says the broker is away", degraded)
	node.start()
	within(t, 3*time.Minute, "serve reconnected after the SIGKILL", reconnected(2))
	open()

	// Every message acked or dead in the store; none both, none twice.
	var dead map[string]int
	outstanding := func() (unacked, notDead []string) {
		ds := readDeliveries(t, logPath)
		dead = deadKeys(t, s, q, amqpMessageID)
		for _, id := range ids {
			if wantDead[id] && dead[id] == 0 {
				notDead = append(notDead, id)
			} else if !wantDead[id] && !acked(ds[id]) {
				unacked = append(unacked, id)
			}
		}
		return unacked, notDead
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		unacked, notDead := outstanding()
		t.Logf("%d messages never acked, e.g. %v; %d never dead in the store, e.g. %v", len(unacked),
			unacked[:min(5, len(unacked))], len(notDead), notDead[:min(5, len(notDead))])
		ds := readDeliveries(t, logPath)
		for _, id := range append(unacked[:min(3, len(unacked))], notDead[:min(3, len(notDead))]...) {
			t.Logf("deliveries of %s: %+v", id, ds[id])
		}
		out, _ := node.ctlErr("list_queues", "name", "messages", "messages_unacknowledged", "consumers", "durable", "arguments")
		t.Logf("the node's queues:\n%s", out)
	})
	last := time.Now()
	within(t, 3*time.Minute, "every message acked or dead in the store", func() bool {
		unacked, notDead := outstanding()
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			t.Logf("%d deliveries; %d messages not acked yet, %d not dead yet", deliveries(), len(unacked), len(notDead))
		}
		return len(unacked) == 0 && len(notDead) == 0
	})
	ds := readDeliveries(t, logPath)
	dead = deadKeys(t, s, q, amqpMessageID)
	for id, times := range dead {
		if !wantDead[id] {
			t.Errorf("%s is dead in the store, but its consumer acks it", id)
		}
		if times > 1 {
			t.Errorf("%s is dead %d times in the store, want once", id, times)
		}
	}
	for id := range wantDead {
		if dead[id] == 0 {
			t.Errorf("%s is not dead in the store (lost?)", id)
		}
		if acked(ds[id]) {
			t.Errorf("%s was acked, though its consumer always rejects it", id)
		}
	}
	select {
	case <-s.done:
		t.Fatalf("serve exited: %v", s.err)
	default:
	}
	out := s.out.String()
	for _, want := range []string{"amqp: connection lost; reconnecting", "amqp: connected"} {
		if c := strings.Count(out, want); c < 2 {
			t.Errorf("serve's log says %q %d times, want once per restart (2)", want, c)
		}
	}
	var deliveriesTotal int
	for _, d := range ds {
		deliveriesTotal += len(d)
	}
	t.Logf("%d messages: %d deliveries, %d dead in the store", n, deliveriesTotal, len(dead))
}
