package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/stableport"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// The tests in this file kill and restart a real Apache Kafka broker. Each
// starts a broker of its own with the project's kafka-local script
// ($REDRIVE_KAFKA_CTL, or .ci/kafka/kafka-local of this checkout), on
// ports of its own, so the shared broker of KAFKA_BROKERS stays up for
// the other tests. On kfake (KAFKA_BROKERS unset) they step aside for
// their kfake counterparts, which restart the in-process cluster.

// ctlEnv names the kafka-local script.
const ctlEnv = "REDRIVE_KAFKA_CTL"

// privateBroker is a single-node Kafka broker that a test owns.
type privateBroker struct {
	ctl  string
	own  []string // the KAFKA_LOCAL_* settings of this broker
	env  []string
	addr string
}

// newPrivateBroker starts a broker for t, stopped when t ends.
func newPrivateBroker(t *testing.T) *privateBroker {
	t.Helper()
	if os.Getenv(brokersEnv) == "" {
		t.Skip("kills a real broker: runs when " + brokersEnv + " names a real cluster (TestBrokerRestart is the kfake counterpart)")
	}
	ctl := os.Getenv(ctlEnv)
	if ctl == "" {
		ctl, _ = filepath.Abs(filepath.Join("..", ".ci", "kafka", "kafka-local"))
	}
	if _, err := os.Stat(ctl); err != nil {
		t.Fatalf("the kafka-local script (set $%s): %v", ctlEnv, err)
	}
	// Ports below the ephemeral range: between the kills, another
	// process's connection could be given a port from net.Listen(":0")
	// and the broker could not start on it again.
	ports := []int{stableport.Pick(t), stableport.Pick(t)}
	for ports[1] == ports[0] {
		ports[1] = stableport.Pick(t)
	}
	b := &privateBroker{ctl: ctl, own: []string{
		"KAFKA_LOCAL_STATE=" + t.TempDir(),
		"KAFKA_LOCAL_PORT=" + strconv.Itoa(ports[0]),
		"KAFKA_LOCAL_CONTROLLER_PORT=" + strconv.Itoa(ports[1]),
		"KAFKA_LOCAL_HEAP=384m",
		// A test binary that dies without its cleanups takes it along.
		"KAFKA_LOCAL_OWNER_PID=" + strconv.Itoa(os.Getpid())}}
	b.env = append(os.Environ(), b.own...)
	b.addr = b.run(t, "start")
	// Registered after TempDir: runs before the state folder is removed.
	t.Cleanup(func() {
		if _, err := b.command("stop"); err != nil {
			t.Errorf("stop the broker: %v", err)
		}
	})
	return b
}

// TestPrivateBrokerEndsWithItsTest: a test binary that ends without
// running its cleanups (go test's -timeout panics, a SIGKILL) does not
// leave its private broker running: the broker runs in a session of its
// own, so nothing else would stop it.
func TestPrivateBrokerEndsWithItsTest(t *testing.T) {
	const child = "REDRIVE_TEST_PRIVATE_BROKER_CHILD"
	if os.Getenv(child) != "" {
		b := newPrivateBroker(t)
		for _, kv := range b.own {
			fmt.Println(kv)
		}
		os.Exit(3) // as a timeout's panic would: no cleanups
	}
	if os.Getenv(brokersEnv) == "" {
		t.Skip("starts a real broker: runs when " + brokersEnv + " names a real cluster")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateBrokerEndsWithItsTest$")
	cmd.Env = append(os.Environ(), child+"=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the child test: %v\n%s", err, out)
	}
	b := &privateBroker{ctl: os.Getenv(ctlEnv)}
	if b.ctl == "" {
		b.ctl, _ = filepath.Abs(filepath.Join("..", ".ci", "kafka", "kafka-local"))
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "KAFKA_LOCAL_") {
			b.own = append(b.own, line)
		}
	}
	if len(b.own) == 0 {
		t.Fatalf("the child test printed no broker settings:\n%s", out)
	}
	b.env = append(os.Environ(), b.own...)
	state := strings.TrimPrefix(b.own[0], "KAFKA_LOCAL_STATE=")
	t.Cleanup(func() {
		b.command("stop")
		os.RemoveAll(filepath.Dir(state))
	})
	// status exits 3 once the broker is stopped.
	testwait.Watch(t, "the broker of a test binary that ended to stop", 2*time.Minute, func() (bool, string) {
		_, err := b.command("status")
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return true, ""
		}
		return false, fmt.Sprintf("kafka-local status: %v", err)
	})
}

func (b *privateBroker) command(args ...string) (string, error) {
	cmd := exec.Command(b.ctl, args...)
	cmd.Env = b.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kafka-local %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func (b *privateBroker) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := b.command(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// crash SIGKILLs the broker, as a machine or OOM kill would, and starts it
// again on the same data and ports; it returns once the broker answers.
func (b *privateBroker) crash(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	b.run(t, "restart", "--kill")
	t.Logf("broker killed (SIGKILL) and answering again after %v", time.Since(t0).Round(time.Millisecond))
}

func (b *privateBroker) cluster() *testCluster { return &testCluster{brokers: []string{b.addr}} }

// outcomes records what the handler decided for each record.
type outcomes struct {
	mu        sync.Mutex
	completed map[string]int
	dead      map[string]int // runs that returned a permanent error
	runs      int
}

func (o *outcomes) add(m map[string]int, id string) {
	o.mu.Lock()
	m[id]++
	o.mu.Unlock()
}

func (o *outcomes) ran() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs
}

// TestRealBrokerKilledTwice: a real broker is SIGKILLed and restarted
// twice while 10,000 records are handled in each delivery mode, both modes
// at once on the broker (two kills in all, each landing while both
// consumers are at work). A tenth of the records fail for good (dead
// letters), four tenths fail once and complete on their retry, the rest
// complete at once. Every record reaches its outcome, none is lost; in
// ExactlyOnce a read_committed reader sees each retry and each dead letter
// exactly once.
func TestRealBrokerKilledTwice(t *testing.T) {
	t.Parallel()
	b := newPrivateBroker(t)
	var runs []*killedRun
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		runs = append(runs, newKilledRun(t, b, mode))
	}
	// Both consumers start once both modes' records are in: neither is
	// far along while the other's are produced.
	for _, r := range runs {
		r.stop = running(t, r.cons)
	}
	// Each kill lands once both consumers have started and one of them
	// has run a third (then two thirds) of its records: the faster is
	// then mid-stream, the slower not further along than it.
	const n = killedRecords
	for _, at := range []int{n / 3, 2 * n / 3} {
		eventually(t, fmt.Sprintf("a run in each mode, %d runs in one", at), 3*time.Minute, func() bool {
			started, far := true, false
			for _, r := range runs {
				ran := r.o.ran()
				started = started && ran > 0
				far = far || ran >= at
			}
			return started && far
		})
		b.crash(t)
	}
	for _, r := range runs {
		r.o.mu.Lock()
		r.doneAtLastCrash = len(r.o.completed) + len(r.o.dead)
		r.o.mu.Unlock()
		t.Logf("%s: %d runs, %d records done at the last crash", r.mode, r.o.ran(), r.doneAtLastCrash)
	}
	for _, r := range runs {
		t.Run(r.mode.String(), r.finish)
	}
}

// killedRecords is how many records each mode of
// TestRealBrokerKilledTwice handles.
const killedRecords = 10000

// killedRun is one delivery mode's consumer of TestRealBrokerKilledTwice.
type killedRun struct {
	mode            kafka.Mode
	c               *testCluster
	rg              *rig
	ids             []string
	o               *outcomes
	cons            *kafka.Consumer
	stop            func()
	doneAtLastCrash int
}

func (r *killedRun) dies(i int) bool    { return i%10 == 0 }
func (r *killedRun) retries(i int) bool { return !r.dies(i) && i%10 < 5 }

// newKilledRun produces the records of one mode on a topic of its own and
// makes its consumer.
func newKilledRun(t *testing.T, b *privateBroker, mode kafka.Mode) *killedRun {
	t.Helper()
	c := b.cluster()
	rg := newRig(t, c, 3)
	r := &killedRun{mode: mode, c: c, rg: rg, ids: rg.produce(t, "rec", killedRecords),
		o: &outcomes{completed: map[string]int{}, dead: map[string]int{}}}
	o := r.o
	p := rg.policy
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: rg.group, Mode: mode,
		Topics:          map[string]kafka.TopicOptions{rg.topic: {Partitions: rg.partitions}},
		Executor:        redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true},
		ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		id := string(j.Payload)
		i, err := strconv.Atoi(strings.TrimPrefix(id, "rec-"))
		if err != nil {
			return redrive.Permanent(fmt.Errorf("not a record of this test: %q", id))
		}
		o.mu.Lock()
		o.runs++
		o.mu.Unlock()
		switch {
		case r.dies(i):
			o.add(o.dead, id)
			return redrive.Permanent(errors.New("this record can never succeed"))
		case r.retries(i) && j.Attempt == 1:
			return errors.New("the first attempt fails")
		}
		o.add(o.completed, id)
		return nil
	})
	r.cons = cons
	return r
}

// finish waits for every record of the mode to reach its outcome, stops
// its consumer and checks what a read_committed reader sees.
func (r *killedRun) finish(t *testing.T) {
	const n = killedRecords
	mode, c, rg, ids, o, stop, doneAtLastCrash := r.mode, r.c, r.rg, r.ids, r.o, r.stop, r.doneAtLastCrash
	dies, retries := r.dies, r.retries
	if doneAtLastCrash >= n {
		t.Fatalf("every record had its outcome before the second crash: the crash tested nothing")
	}

	// Every record reaches its outcome: completed, or dead and in the DLT.
	wantDead := map[string]bool{}
	wantDone := map[string]bool{}
	wantRetry := map[string]bool{}
	for i, id := range ids {
		switch {
		case dies(i):
			wantDead[id] = true
		default:
			wantDone[id] = true
			if retries(i) {
				wantRetry[id] = true
			}
		}
	}
	eventually(t, "every record handled to its outcome", 5*time.Minute, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for id := range wantDone {
			if o.completed[id] == 0 {
				return false
			}
		}
		for id := range wantDead {
			if o.dead[id] == 0 {
				return false
			}
		}
		return true
	})
	if mode == kafka.AtLeastOnce {
		rg.waitSettled(t, 2*time.Minute)
	}
	stop()

	// What a downstream reader sees: every transaction has ended (the
	// consumer stopped), so reading up to a marker produced now reads all.
	dead := readToEnd(t, c, rg.topo.DLT(), rg.partitions)
	tier := readToEnd(t, c, rg.topo.TierTopic(rg.policy.Initial), rg.partitions)
	check := func(what string, got map[string]int, want map[string]bool) {
		missing, extra, twice := 0, 0, 0
		for id := range want {
			switch got[id] {
			case 0:
				if missing++; missing <= 5 {
					t.Errorf("%s: %s missing (lost)", what, id)
				}
			case 1:
			default:
				twice++
				if mode == kafka.ExactlyOnce && twice <= 5 {
					t.Errorf("%s: %s seen %d times by a read_committed reader, want once", what, id, got[id])
				}
			}
		}
		for id := range got {
			if !want[id] {
				if extra++; extra <= 5 {
					t.Errorf("%s: %s should not be there", what, id)
				}
			}
		}
		t.Logf("%s: %d records, %d missing, %d unexpected, %d seen more than once", what, len(want), missing, extra, twice)
	}
	check("dead letters", dead, wantDead)
	check("retries", tier, wantRetry)
	o.mu.Lock()
	dupDone := 0
	for _, v := range o.completed {
		dupDone += v - 1
	}
	t.Logf("%s: %d runs for %d records; %d completions beyond one per record; %d records done at the last crash",
		mode, o.runs, n, dupDone, doneAtLastCrash)
	o.mu.Unlock()
}

// readToEnd reads topic with read_committed isolation up to a marker
// record it produces to each partition now, and counts its records by key.
func readToEnd(t *testing.T, c *testCluster, topic string, partitions int32) map[string]int {
	t.Helper()
	marker := fmt.Sprintf("end-marker-%d", time.Now().UnixNano())
	pcl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range partitions {
		c.produce(t, pcl, &kgo.Record{Topic: topic, Partition: p, Key: []byte(marker)})
	}
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[string]int{}
	markers := map[int32]bool{}
	for len(markers) < int(partitions) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: the end markers of %d of %d partitions never came", topic, len(markers), partitions)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == marker {
				markers[r.Partition] = true
				return
			}
			got[string(r.Key)]++
		})
	}
	return got
}

// The consumer process of TestConsumerKilledMidBatch, run by the test
// binary itself with these variables set.
const (
	childBrokersEnv = "REDRIVE_KAFKA_CHILD_BROKERS"
	childTopicEnv   = "REDRIVE_KAFKA_CHILD_TOPIC"
	childModeEnv    = "REDRIVE_KAFKA_CHILD_MODE"
	childLogEnv     = "REDRIVE_KAFKA_CHILD_LOG"
)

// childDies and childRetries say what the child's handler does with
// record i: fail it for good, or fail its first attempt.
func childDies(i int) bool    { return i%10 == 0 }
func childRetries(i int) bool { return !childDies(i) && i%10 < 5 }

// TestKafkaConsumerChild is the consumer process of
// TestConsumerKilledMidBatch; in a normal run it does nothing. It appends
// "done ID" or "dead ID" to its log as each handler returns, and runs
// until killed.
func TestKafkaConsumerChild(t *testing.T) {
	brokers := os.Getenv(childBrokersEnv)
	if brokers == "" {
		return
	}
	topic := os.Getenv(childTopicEnv)
	mode := kafka.AtLeastOnce
	if os.Getenv(childModeEnv) == kafka.ExactlyOnce.String() {
		mode = kafka.ExactlyOnce
	}
	logf, err := os.OpenFile(os.Getenv(childLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p := childPolicy()
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: strings.Split(brokers, ","), Group: topic + "-g", Mode: mode,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 3}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DisableRetryBudget: true},
		// The group gives a killed member's partitions away once its
		// session times out: 6 s (the broker's minimum), not kgo's 45 s.
		ClientOptions: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		id := string(j.Payload)
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "rec-"))
		// A little work per record, so that the kill lands mid-batch (real
		// time passing).
		time.Sleep(200 * time.Microsecond)
		outcome, err := "done", error(nil)
		switch {
		case childDies(i):
			outcome, err = "dead", redrive.Permanent(errors.New("never"))
		case childRetries(i) && j.Attempt == 1:
			return errors.New("the first attempt fails")
		}
		mu.Lock()
		fmt.Fprintf(logf, "%s %s\n", outcome, id)
		mu.Unlock()
		return err
	})
	if err := cons.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func childPolicy() retry.Policy {
	return retry.Policy{MaxRetries: 3, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
}

// TestConsumerKilledMidBatch: a consumer process is SIGKILLed while it
// works through 3,000 records (a tenth dead, four tenths retried once),
// and a second one takes over, in both delivery modes: every record
// reaches its outcome, and a read_committed reader sees each retry and
// dead letter (in ExactlyOnce, exactly once). It runs on kfake (the
// cluster in this process) and on a real broker.
func TestConsumerKilledMidBatch(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			const n = 3000
			c := newCluster(t)
			topic := newTopic(t)
			topo := kafka.NewTopology(topic, childPolicy())
			topo.Partitions = 3
			adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(50*time.Millisecond)))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := topo.Ensure(ctx, adm, true); err != nil {
				t.Fatal(err)
			}
			pcl := c.client(t)
			rs := make([]*kgo.Record, n)
			for i := range rs {
				id := fmt.Sprintf("rec-%04d", i)
				r, err := kafka.NewRecord(topic, "job", []byte(id), []byte(id))
				if err != nil {
					t.Fatal(err)
				}
				rs[i] = r
			}
			c.produce(t, pcl, rs...)

			logPath := filepath.Join(t.TempDir(), "outcomes")
			start := func() *exec.Cmd {
				cmd := exec.Command(os.Args[0], "-test.run=^TestKafkaConsumerChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), childBrokersEnv+"="+strings.Join(c.brokers, ","), childTopicEnv+"="+topic,
					childModeEnv+"="+mode.String(), childLogEnv+"="+logPath)
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					cmd.Process.Kill()
					cmd.Wait()
					if t.Failed() {
						t.Logf("consumer process %d's output:\n%s", cmd.Process.Pid, out.String())
					}
				})
				return cmd
			}
			outcomes := func() (done, dead map[string]int) {
				done, dead = map[string]int{}, map[string]int{}
				b, _ := os.ReadFile(logPath)
				for _, line := range strings.Split(string(b), "\n") {
					if what, id, ok := strings.Cut(line, " "); ok {
						if what == "done" {
							done[id]++
						} else {
							dead[id]++
						}
					}
				}
				return done, dead
			}
			first := start()
			eventually(t, "a third of the records handled", 3*time.Minute, func() bool {
				done, dead := outcomes()
				return len(done)+len(dead) >= n/3
			})
			if err := first.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			first.Wait()
			done, dead := outcomes()
			t.Logf("consumer SIGKILLed with %d of %d records handled", len(done)+len(dead), n)
			start()
			eventually(t, "every record handled to its outcome", 3*time.Minute, func() bool {
				done, dead := outcomes()
				return len(done)+len(dead) == n
			})

			wantDead, wantRetry := map[string]bool{}, map[string]bool{}
			for i := range n {
				id := fmt.Sprintf("rec-%04d", i)
				if childDies(i) {
					wantDead[id] = true
				} else if childRetries(i) {
					wantRetry[id] = true
				}
			}
			// The second consumer may still hold a transaction open: the
			// markers read after every transaction before them ends.
			deadSeen := readToEnd(t, c, topo.DLT(), 3)
			retried := readToEnd(t, c, topo.TierTopic(childPolicy().Initial), 3)
			for what, m := range map[string]struct {
				got  map[string]int
				want map[string]bool
			}{"dead letters": {deadSeen, wantDead}, "retries": {retried, wantRetry}} {
				missing, twice := 0, 0
				for id := range m.want {
					switch m.got[id] {
					case 0:
						missing++
					case 1:
					default:
						twice++
					}
				}
				if missing > 0 || len(m.got) != len(m.want) {
					t.Errorf("%s: %d of %d missing, %d distinct seen", what, missing, len(m.want), len(m.got))
				}
				if mode == kafka.ExactlyOnce && twice > 0 {
					t.Errorf("%s: %d seen more than once by a read_committed reader, want none", what, twice)
				}
				t.Logf("%s: %d, %d missing, %d seen more than once", what, len(m.want), missing, twice)
			}
		})
	}
}
