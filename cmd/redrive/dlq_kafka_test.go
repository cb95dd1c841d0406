package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/internal/testtopics"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// kafkaCluster returns the real cluster of KAFKA_BROKERS (as CI sets
// it), or starts an in-process one (kfake) for the test.
func kafkaCluster(t *testing.T) []string {
	t.Helper()
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		return strings.Split(b, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// kafkaTopicName returns base on kfake (a cluster of the test's own), and
// base with a unique suffix on a real cluster, which keeps its topics
// from one run to the next.
func kafkaTopicName(base string) string {
	if os.Getenv("KAFKA_BROKERS") == "" {
		return base
	}
	return fmt.Sprintf("%s%s-%d", testtopics.Prefix(), base, time.Now().UnixNano())
}

// kafkaDeadLetters runs a consumer of topic (2 partitions, 10ms retries,
// one retry) until the end of the test and produces records to it: those
// keyed perm-* fail permanently, those keyed flaky-* fail until fixed is
// called, the others succeed. It returns fixed and the count of runs by
// key.
func kafkaDeadLetters(t *testing.T, brokers []string, topic string, keys ...string) (fixed func(), runs func(key string) int) {
	t.Helper()
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ok := false
	ran := map[string]int{}
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		mu.Lock()
		defer mu.Unlock()
		ran[k]++
		switch {
		case strings.HasPrefix(k, "perm"):
			return redrive.Permanent(errors.New("not a PDF"))
		case strings.HasPrefix(k, "flaky") && !ok:
			return errors.New("scanner down")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The consumer creates the topics; wait for them before producing.
	waitKafkaTopics(t, brokers, topic)
	for _, k := range keys {
		r, err := kafka.NewRecord(topic, "scan", map[string]string{"doc": k}, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return func() { mu.Lock(); ok = true; mu.Unlock() },
		func(k string) int { mu.Lock(); defer mu.Unlock(); return ran[k] }
}

// waitKafkaTopics waits until topic's topology (its DLT last) exists.
func waitKafkaTopics(t *testing.T, brokers []string, topic string) {
	t.Helper()
	eventually(t, "the topics", func() bool {
		d, err := kafka.NewDLT(brokers, topic, kafka.DLTOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		_, err = d.Count(context.Background())
		return err == nil
	})
}

// dltCount reads topic's DLT count.
func dltCount(t *testing.T, brokers []string, topic string) kafka.DLTCount {
	t.Helper()
	d, err := kafka.NewDLT(brokers, topic, kafka.DLTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	n, err := d.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKafkaDLQCommands drives `redrive dlq count|ls|redrive --kafka-topic`
// against dead letters a consumer produced on kfake.
func TestKafkaDLQCommands(t *testing.T) {
	t.Parallel()
	brokers := kafkaCluster(t)
	topic := kafkaTopicName("scans")
	fix, runs := kafkaDeadLetters(t, brokers, topic, "flaky-1", "flaky-2", "perm-1", "ok-1")
	eventually(t, "three dead letters", func() bool { return dltCount(t, brokers, topic).Total == 3 })

	flags := []string{"--kafka-brokers", strings.Join(brokers, ","), "--kafka-topic", topic, "--db", auditDB(t)}
	cli := func(args ...string) string { return mustCLI(t, append(args, flags...)...) }

	if out := strings.TrimSpace(cli("dlq", "count")); out != "3 dead letter(s) in "+topic+"-dlt, 3 pending (not redriven yet)" {
		t.Errorf("dlq count = %q", out)
	}
	if n := decode[kafka.DLTCount](t, cli("--json", "dlq", "count")); n.Total != 3 || n.Pending != 3 {
		t.Errorf("dlq count --json = %+v", n)
	}
	out := cli("dlq", "ls", "--limit", "2")
	for _, want := range []string{"PARTITION/OFFSET", "KEY", "REASON", "CLASS", "ATTEMPTS", "DEAD AT", "ERROR", "first 2 of 3 pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq ls --limit 2: no %q in\n%s", want, out)
		}
	}
	rows := 0
	for line := range strings.Lines(out) {
		if line[0] >= '0' && line[0] <= '9' {
			rows++
		}
	}
	if got := rows; got != 2 {
		t.Errorf("dlq ls --limit 2: %d rows, want 2:\n%s", got, out)
	}
	out = cli("dlq", "ls")
	for _, want := range []string{"flaky-1", "flaky-2", "perm-1", "retries_exhausted", "permanent", "scanner down", "not a PDF"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq ls: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "ok-1") || strings.Contains(out, "showing") {
		t.Errorf("dlq ls:\n%s", out)
	}
	dead := decode[[]kafka.DeadLetter](t, cli("--json", "dlq", "ls"))
	if len(dead) != 3 {
		t.Fatalf("dlq ls --json: %d dead letters, want 3", len(dead))
	}
	var perm kafka.DeadLetter
	for _, d := range dead {
		switch {
		case strings.HasPrefix(string(d.Key), "flaky"):
			if d.Reason != "retries_exhausted" || d.Attempts != 2 || len(d.History) != 2 || d.Error != "scanner down" || d.DeadAt.IsZero() {
				t.Errorf("%s: %+v", d.Key, d)
			}
		case string(d.Key) == "perm-1":
			perm = d
			if d.Reason != "permanent" || d.Class != "permanent" || d.Attempts != 1 || len(d.History) != 1 {
				t.Errorf("%s: %+v", d.Key, d)
			}
		default:
			t.Errorf("unexpected dead letter %+v", d)
		}
	}
	// --from reads from given offsets: perm-1's partition, from its offset.
	from := fmt.Sprintf("%d:%d", perm.Partition, perm.Offset)
	if got := decode[[]kafka.DeadLetter](t, cli("--json", "dlq", "ls", "--from", from, "--limit", "1")); len(got) != 1 || string(got[0].Key) != "perm-1" {
		t.Errorf("dlq ls --from %s: %+v", from, got)
	}

	// Refusals, before or after reaching the brokers.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "ls", "--queue", "x"}, "--queue applies to the store's dead jobs, not to a Kafka dead-letter topic"},
		{[]string{"dlq", "ls", "--from", "0:x"}, `--from: "0:x": offset "x": want an integer`},
		{[]string{"dlq", "ls", "--from", "9:0"}, "--from names partition 9, but " + topic + "-dlt has 2 partition(s): 0 to 1"},
		{[]string{"dlq", "ls", "--limit", "1001"}, "--limit must be from 1 to 1000"},
		{[]string{"dlq", "redrive"}, "say which dead letters to redrive"},
		{[]string{"dlq", "redrive", "5"}, "no job ids"},
		{[]string{"dlq", "redrive", "--all", "--max", "2"}, "--all redrives every pending dead letter: give it alone"},
		{[]string{"dlq", "redrive", "--from", "0"}, `--from: "0": want PARTITION:OFFSET`},
		{[]string{"dlq", "redrive", "--from", "0:120,1:40", "--to", "2:5"}, "--to names partition 2, which --from does not"},
		{[]string{"dlq", "redrive", "--from", "0:120", "--to", "0:100"}, "--to 0:100 is not after --from 0:120"},
		{[]string{"dlq", "redrive", "--from", "0:1,0:2"}, "--from: partition 0 given twice"},
		{[]string{"dlq", "redrive", "--from", "-1:0"}, `partition "-1": want an integer from 0`},
		{[]string{"dlq", "redrive", "--max", "-1"}, "--max must be positive"},
		{[]string{"dlq", "redrive", "--all", "--rate", "-1"}, "--rate must not be negative"},
		{[]string{"dlq", "redrive", "--all", "--kind", "scan"}, "--kind applies to the store's dead jobs"},
		{[]string{"dlq", "redrive", "--all"}, "no answer on standard input; pass --yes"},
		{[]string{"dlq", "purge", "--all", "--yes"}, "append-only"},
		{[]string{"dlq", "count", "--amqp-queue", "q"}, "give a RabbitMQ DLQ or a Kafka dead-letter topic, not both"},
	} {
		_, stderr, err := runCLIIn(t, "", append(c.args, flags...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("redrive %s: %v %s; want %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
	// A "no" keeps everything in place.
	if _, stderr, err := runCLIIn(t, "n\n", append([]string{"dlq", "redrive", "--all"}, flags...)...); !errors.Is(err, errNotConfirmed) ||
		!strings.Contains(stderr, "Redrive 3 dead letter(s) from "+topic+"-dlt back to "+topic+"? [y/N]") {
		t.Errorf("redrive answered no: %v, stderr %q", err, stderr)
	}
	if n := dltCount(t, brokers, topic); n.Pending != 3 {
		t.Errorf("after a refused redrive: %+v", n)
	}

	// Redrive the exhausted ones only, confirmed on standard input; fixed
	// meanwhile, they complete.
	fix()
	stdout, stderr, err := runCLIIn(t, "y\n", append([]string{"dlq", "redrive", "--all", "--reason", "retries_exhausted", "--note", "scanner back"},
		flags...)...)
	if err != nil {
		t.Fatalf("redrive --reason: %v %s", err, stderr)
	}
	if !strings.Contains(stderr, "Redrive up to 3 dead letter(s) matching reason=retries_exhausted from "+topic+"-dlt back to "+topic+"?") ||
		!strings.Contains(stdout, "redriven 2 dead letter(s) from "+topic+"-dlt back to "+topic+"; skipped 1") ||
		!strings.Contains(stdout, "the skipped ones stay pending") {
		t.Errorf("redrive --reason: stdout %q stderr %q", stdout, stderr)
	}
	// Recorded in the store's audit log (--db), as local.
	if es := auditEntries(t, flags[len(flags)-1], "dlq redrive"); len(es) != 1 || es[0].Actor != localActor || es[0].Count != 2 ||
		es[0].Note != "scanner back" || !strings.Contains(es[0].Target, `"kafka_topic":"`+topic+`"`) || !strings.Contains(es[0].Target, `"reason":"retries_exhausted"`) {
		t.Errorf("audit entries of the redrive: %+v", es)
	}
	eventually(t, "the redriven records to run again", func() bool { return runs("flaky-1") == 3 && runs("flaky-2") == 3 })
	// They came back to the main topic, redriven once, with a history of
	// both lives.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var back []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(back) < 6 && ctx.Err() == nil {
		back = append(back, cl.PollFetches(ctx).Records()...)
	}
	redriven := map[string]string{}
	for _, r := range back {
		for _, h := range r.Headers {
			if h.Key == kafka.HeaderRedriven {
				redriven[string(r.Key)] = string(h.Value)
			}
			if h.Key == kafka.HeaderHistory && !bytes.Contains(h.Value, []byte("scanner back")) {
				t.Errorf("%s: the redriven event and its note are not in the history: %s", r.Key, h.Value)
			}
		}
	}
	if len(back) != 6 || !maps.Equal(redriven, map[string]string{"flaky-1": "1", "flaky-2": "1"}) {
		t.Errorf("the main topic holds %d records, redriven %v; want the 4 produced and the 2 redriven, once each", len(back), redriven)
	}
	// The one the filter skipped stays pending, until an operator
	// discards it.
	if n := decode[kafka.DLTCount](t, cli("--json", "dlq", "count")); n.Total != 3 || n.Pending != 1 {
		t.Errorf("count after the redrive: %+v, want 3 in all, perm-1 pending", n)
	}
	if left := decode[[]kafka.DeadLetter](t, cli("--json", "dlq", "ls")); len(left) != 1 || string(left[0].Key) != "perm-1" {
		t.Errorf("ls after the redrive: %+v, want perm-1", left)
	}
	if out := cli("dlq", "redrive", "--all", "--discard", "--yes"); !strings.Contains(out, "discarded 1 dead letter(s) of "+topic+"-dlt") {
		t.Errorf("redrive --discard: %q", out)
	}
	if n := decode[kafka.DLTCount](t, cli("--json", "dlq", "count")); n.Total != 3 || n.Pending != 0 {
		t.Errorf("count after the discard: %+v, want 3 in all, none pending", n)
	}
	if out := cli("dlq", "ls"); !strings.Contains(out, "No dead letters pending in "+topic+"-dlt (3 in all") {
		t.Errorf("ls after the redrive: %q", out)
	}
	if out := cli("dlq", "redrive", "--all", "--yes"); !strings.Contains(out, "No dead letters pending in "+topic+"-dlt: nothing to redrive") {
		t.Errorf("redrive with nothing pending: %q", out)
	}

	// By offset: perm-1 again (it fails again, and dies again), --json.
	res := decode[kafka.RedriveResult](t, cli("--json", "dlq", "redrive", "--from", from,
		"--to", fmt.Sprintf("%d:%d", perm.Partition, perm.Offset+1), "--yes", "--rate", "1000"))
	if res.Redriven != 1 || res.Skipped != 0 {
		t.Errorf("redrive by offset: %+v", res)
	}
	eventually(t, "perm-1 to die again", func() bool { return runs("perm-1") == 2 && dltCount(t, brokers, topic).Total == 4 })
	again := decode[[]kafka.DeadLetter](t, cli("--json", "dlq", "ls"))
	if len(again) != 1 || string(again[0].Key) != "perm-1" || again[0].Redriven != 1 || len(again[0].History) != 3 {
		t.Errorf("perm-1 dead again: %+v", again)
	}
	if out := cli("dlq", "redrive", "--max", "1", "--class", "permanent", "--yes"); !strings.Contains(out, "redriven 1 dead letter(s)") {
		t.Errorf("redrive --max 1 --class permanent: %q", out)
	}
}

// TestKafkaDLQBrokers: the brokers come from the flag or the environment,
// and their absence, a bad address or a missing topic are said clearly.
func TestKafkaDLQBrokers(t *testing.T) {
	clearConnEnv(t)
	t.Setenv(kafkaBrokersEnv, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "count", "--kafka-topic", "t"}, "--kafka-topic needs the brokers: set --kafka-brokers or $REDRIVE_KAFKA_BROKERS"},
		{[]string{"dlq", "count", "--kafka-brokers", "localhost:9092"}, "--kafka-brokers needs --kafka-topic"},
		{[]string{"dlq", "count", "--kafka-topic", "t", "--kafka-brokers", "localhost"}, `--kafka-brokers: "localhost": want host:port`},
		{[]string{"dlq", "count", "--kafka-topic", "t", "--kafka-brokers", " , "}, "--kafka-brokers: no broker"},
		{[]string{"dlq", "count", "--kafka-topic", "a/b", "--kafka-brokers", "localhost:9092"}, "--kafka-topic: kafka: topology: topic \"a/b\""},
		{[]string{"dlq", "purge", "--kafka-topic", "t"}, "append-only: its records cannot be purged. They leave it when the topic's retention"},
		{[]string{"dlq", "purge", "--kafka-topic", "t"}, "retention.ms or retention.bytes on t-dlt"},
	} {
		_, stderr, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("redrive %s: %v %s; want %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
	t.Setenv(kafkaBrokersEnv, "localhost:0x")
	if _, stderr, err := runCLI(t, "dlq", "count", "--kafka-topic", "t"); err == nil || !strings.Contains(stderr, "$REDRIVE_KAFKA_BROKERS: \"localhost:0x\"") {
		t.Errorf("a bad $%s: %v %s", kafkaBrokersEnv, err, stderr)
	}

	brokers := kafkaCluster(t)
	t.Setenv(kafkaBrokersEnv, strings.Join(brokers, ","))
	if _, stderr, err := runCLI(t, "dlq", "count", "--kafka-topic", "nope"); err == nil ||
		!strings.Contains(stderr, "no dead-letter topic nope-dlt on "+brokers[0]) {
		t.Errorf("a topic without a DLT: %v %s", err, stderr)
	}
	env := kafkaTopicName("env")
	kafkaDeadLetters(t, brokers, env, "perm-1")
	eventually(t, "a dead letter", func() bool { return dltCount(t, brokers, env).Total == 1 })
	if out := mustCLI(t, "dlq", "count", "--kafka-topic", env); !strings.Contains(out, "1 dead letter(s) in "+env+"-dlt, 1 pending") {
		t.Errorf("count with $%s: %q", kafkaBrokersEnv, out)
	}
}

// TestKafkaBench runs `redrive bench kafka` on a small N, on the
// in-process cluster it starts and on one given by --kafka-brokers: the
// redrive phases, the raw kgo phases beside them with their ratios, and
// the retry lateness phase.
func TestKafkaBench(t *testing.T) {
	t.Setenv(kafkaBrokersEnv, "")
	out := mustCLI(t, "bench", "kafka", "-n", "300", "--lateness-records", "40", "--lateness-delay", "200ms")
	for _, want := range []string{"kfake", "produce", "consume, no-op handler", "consume, fails once", "completed 600, retried 300, dead 0",
		"raw kgo produce                  300 in", "raw kgo consume, no-op           300 in", "raw kgo retry path               300 in",
		"redrive/raw                      produce ", "retry lateness vs failure+delay  p50 ", "n=40) (goal: p99 at most 150ms)",
		"lateness phase           40 records, the first attempt fails, 1 retry after 200ms (the 200ms tier)",
		"completed 40, retried 40, dead 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench kafka: no %q in\n%s", want, out)
		}
	}
	brokers := kafkaCluster(t)
	raw := mustCLI(t, "--json", "bench", "kafka", "-n", "200", "--partitions", "2", "--lateness-records", "30", "--kafka-brokers",
		strings.Join(brokers, ","))
	res := decode[map[string]any](t, raw)
	params, _ := res["params"].(map[string]any)
	if res["workload"] != "kafka" || params["in_process"] != false || params["n"] != float64(200) || params["partitions"] != float64(2) {
		t.Errorf("bench kafka --json: %v", res)
	}
	r := decode[bench.KafkaResult](t, raw)
	if r.Params.LatenessRecords != 30 || r.Params.LatenessDelay != bench.Duration(time.Second) {
		t.Errorf("lateness params: %+v", r.Params)
	}
	if r.Raw.Consumed != 200 || r.Raw.RetryMain != 200 || r.Raw.RetryTier != 200 {
		t.Errorf("raw counts: consumed %d, retry path %d then %d; want 200 each", r.Raw.Consumed, r.Raw.RetryMain, r.Raw.RetryTier)
	}
	if r.Raw.ProduceRate <= 0 || r.Raw.ConsumeRate <= 0 || r.Raw.RetryPathRate <= 0 || r.Raw.Consume < r.Raw.ConsumeFirst ||
		r.Raw.RetryPath < r.Raw.RetryPathFirst {
		t.Errorf("raw figures: %+v", r.Raw)
	}
	if want := (bench.KafkaRatios{Produce: r.ProduceRate / r.Raw.ProduceRate, Consume: r.ConsumeRate / r.Raw.ConsumeRate,
		ConsumeAfterFirst: r.ConsumeAfterFirstRate / r.Raw.ConsumeAfterFirstRate, RetryPath: r.FailOnceRate / r.Raw.RetryPathRate}); r.Ratios != want {
		t.Errorf("ratios %+v, want %+v", r.Ratios, want)
	}
	l := r.Lateness
	if l == nil {
		t.Fatal("no lateness phase")
	}
	if l.Stats.Completed != 30 || l.Stats.Retried != 30 || l.Stats.Dead != 0 {
		t.Errorf("lateness consumer: %+v", l.Stats)
	}
	for name, p := range map[string]bench.Percentiles{"since failure": l.SinceFailure, "vs due": l.VsDue} {
		if p.N != 30 || p.P50 < p.Min || p.P99 < p.P50 || p.Max < p.P99 || p.Mean < p.Min || p.Mean > p.Max {
			t.Errorf("lateness %s percentiles inconsistent: %+v", name, p)
		}
	}
	// The first attempt ended before the engine computed the due time
	// (up to the due time's rounding to the millisecond and clock reads).
	if l.SinceFailure.Min < l.VsDue.Min-bench.Duration(time.Millisecond) || l.Elapsed < bench.Duration(time.Second) {
		t.Errorf("lateness since failure %s < vs due %s, or phase %s shorter than the delay", l.SinceFailure.Min, l.VsDue.Min, l.Elapsed)
	}

	// No lateness phase with --lateness-records 0; the profiles asked for
	// are written.
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	r = decode[bench.KafkaResult](t, mustCLI(t, "--json", "bench", "kafka", "-n", "20", "--lateness-records", "0",
		"--cpuprofile", cpu, "--memprofile", mem))
	if r.Lateness != nil || r.Raw.Consumed != 20 {
		t.Errorf("--lateness-records 0: lateness %+v, raw %+v", r.Lateness, r.Raw)
	}
	for _, f := range []string{cpu, mem} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s not written: %v", f, err)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"-n 0", "-n and --partitions must be at least 1"},
		{"--lateness-records -1", "--lateness-records must not be negative, got -1"},
		{"--lateness-delay 0s", "--lateness-delay must be positive, got 0s"},
	} {
		if _, stderr, err := runCLI(t, append([]string{"bench", "kafka"}, strings.Fields(tc.args)...)...); err == nil ||
			!strings.Contains(stderr, tc.want) {
			t.Errorf("bench kafka %s: %v %s", tc.args, err, stderr)
		}
	}
}

// FuzzKafkaOffsets: --from and --to are parsed without panicking; what
// is accepted is within bounds, formats back to itself, and keeps --to
// within --from; what is refused names its flag.
func FuzzKafkaOffsets(f *testing.F) {
	for _, s := range [][2]string{
		{"0:120,1:40", "0:200"},
		{"0:0", ""},
		{" 3 : 7 , 4:8 ", "3:9,4:9"},
		{"0:120", "0:100"},
		{"0:1,0:2", ""},
		{"1:5", "2:6"},
		{"-1:0", ""},
		{"0:-1", ""},
		{"2147483648:0", ""},
		{"0:9223372036854775808", ""},
		{"+1:+2", ""},
		{"0:1,", ""},
		{",", ""},
		{"", "0:1"},
		{"x", "y"},
		{"0:1:2", ""},
		{"\xff:0", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, from, to string) {
		for _, set := range [][2]bool{{true, true}, {true, false}, {false, true}} {
			fm, tm, err := parseKafkaRange(from, to, set[0], set[1])
			if err != nil {
				if !strings.HasPrefix(err.Error(), "--from") && !strings.HasPrefix(err.Error(), "--to") {
					t.Fatalf("%q %q: the error does not name its flag: %v", from, to, err)
				}
				continue
			}
			if (fm != nil) != set[0] || (tm != nil) != set[1] {
				t.Fatalf("%q %q %v: from %v to %v", from, to, set, fm, tm)
			}
			for _, m := range []map[int32]int64{fm, tm} {
				if m == nil {
					continue
				}
				if len(m) == 0 {
					t.Fatalf("%q %q: accepted no offset", from, to)
				}
				for p, o := range m {
					if p < 0 || o < 0 {
						t.Fatalf("%q %q: accepted %d:%d", from, to, p, o)
					}
				}
				s := formatKafkaOffsets(m)
				back, err := parseKafkaOffsets(s)
				if err != nil || !maps.Equal(back, m) {
					t.Fatalf("%q %q: %v formats as %q, which parses as %v %v", from, to, m, s, back, err)
				}
				if got := strings.Count(s, ",") + 1; got != len(m) {
					t.Fatalf("%q: %d entries for %d partitions", s, got, len(m))
				}
			}
			if fm != nil {
				for p, end := range tm {
					if start, ok := fm[p]; !ok || end <= start {
						t.Fatalf("%q %q: accepted --to %d:%d against --from %v", from, to, p, end, fm)
					}
				}
			}
		}
	})
}

// TestKafkaDLQCountTransactions: a DLT written in transactions (as an
// exactly-once consumer writes it), one of them aborted: `dlq count`,
// and the question `dlq redrive --from` asks, count dead letters, not
// offsets (which also hold the transaction markers and the aborted
// dead letters).
func TestKafkaDLQCountTransactions(t *testing.T) {
	t.Parallel()
	brokers := kafkaCluster(t)
	topic := kafkaTopicName("txn-scans")
	ctx := context.Background()
	topo := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second}, Partitions: 1, Replication: -1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := topo.Ensure(ctx, adm, true); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic, topo.DLT(), topo.TierTopic(time.Second)) })
	}
	for i, commit := range []bool{true, false, true, true} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: topo.DLT(), Key: []byte(fmt.Sprint("perm-", i)), Value: []byte("x"), Headers: []kgo.RecordHeader{
			{Key: kafka.HeaderKind, Value: []byte("scan")}, {Key: kafka.HeaderReason, Value: []byte("permanent")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, map[bool]kgo.TransactionEndTry{true: kgo.TryCommit, false: kgo.TryAbort}[commit]); err != nil {
			t.Fatal(err)
		}
	}
	// A real broker writes the last marker after EndTransaction returns.
	waitUntil(t, time.Minute, "the DLT counts its 3 committed dead letters", func() error {
		if c := dltCount(t, brokers, topic); c.Total != 3 {
			return fmt.Errorf("counted %d", c.Total)
		}
		return nil
	})
	flags := []string{"--kafka-brokers", strings.Join(brokers, ","), "--kafka-topic", topic, "--db", auditDB(t)}
	if out := strings.TrimSpace(mustCLI(t, append([]string{"dlq", "count"}, flags...)...)); out != "3 dead letter(s) in "+topic+"-dlt, 3 pending (not redriven yet)" {
		t.Errorf("dlq count = %q", out)
	}
	_, stderr, err := runCLIIn(t, "n\n", append([]string{"dlq", "redrive", "--from", "0:0"}, flags...)...)
	if !errors.Is(err, errNotConfirmed) || !strings.Contains(stderr, "Redrive 3 dead letter(s) from "+topic+"-dlt (") {
		t.Errorf("redrive --from 0:0 answered no: %v, stderr %q", err, stderr)
	}
}
