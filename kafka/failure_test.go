package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// The failure-injection tests: records whose first attempt fails and
// second completes, so each one takes a retry produce, a tier and two
// commits, while the cluster misbehaves. They count, per record, how many
// times each attempt ran: at-least-once means every record completes;
// a duplicate is a run beyond the first of an attempt.

// runs counts the runs of each attempt of each record, by id.
type runs struct {
	mu        sync.Mutex
	attempts  map[string]map[int]int
	completed map[string]int
	started   atomic.Int64 // runs
	total     atomic.Int64 // completions
}

func newRuns() *runs {
	return &runs{attempts: map[string]map[int]int{}, completed: map[string]int{}}
}

func (r *runs) ran(id string, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempts[id] == nil {
		r.attempts[id] = map[int]int{}
	}
	r.attempts[id][attempt]++
	r.started.Add(1)
}

func (r *runs) complete(id string) {
	r.mu.Lock()
	r.completed[id]++
	r.mu.Unlock()
	r.total.Add(1)
}

// count returns how many times attempt ran for id.
func (r *runs) count(id string, attempt int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id][attempt]
}

func (r *runs) completions(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.completed[id]
}

// allCompleted reports whether every id completed at least once.
func (r *runs) allCompleted(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.completed[id] == 0 {
			return false
		}
	}
	return true
}

// missing returns the ids that never completed.
func (r *runs) missing(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		if r.completed[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// waitCompleted waits until every record of ids completed once at least;
// a liveness guard, failing with the records still missing.
func (r *runs) waitCompleted(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	testwait.Watch(t, "every record completed (none lost)", within, func() (bool, string) {
		if r.allCompleted(ids) {
			return true, ""
		}
		missing := r.missing(ids)
		return false, fmt.Sprintf("%d of %d records not completed, e.g. %v", len(missing), len(ids), missing[:min(len(missing), 5)])
	})
}

// duplicates returns, over ids, the completions beyond one per record and
// the runs beyond one per attempt.
func (r *runs) duplicates(ids []string) (completions, runs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		completions += max(r.completed[id]-1, 0)
		for _, n := range r.attempts[id] {
			runs += max(n-1, 0)
		}
	}
	return completions, runs
}

// snapshot returns the run counts of ids.
func (r *runs) snapshot(ids []string) map[string]map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[int]int{}
	for _, id := range ids {
		out[id] = map[int]int{}
		for a, n := range r.attempts[id] {
			out[id][a] = n
		}
	}
	return out
}

// rig is one main topic, its topology created up front, its records and
// the consumers of one group.
type rig struct {
	c          *testCluster
	topic      string
	group      string
	partitions int32
	policy     retry.Policy
	topo       kafka.Topology
	adm        *kadm.Client
	runs       *runs
}

// newRig creates a main topic of partitions partitions and its tiers and
// DLT, for records retried after 20 ms (then 40, 80), without jitter.
func newRig(t *testing.T, c *testCluster, partitions int32) *rig {
	t.Helper()
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 3, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second,
		Jitter: retry.JitterNone}
	topo := kafka.NewTopology(topic, p)
	topo.Partitions = partitions
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(50*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := topo.Ensure(ctx, adm, true); err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, topic: topic, group: topic + "-g", partitions: partitions, policy: p, topo: topo, adm: adm,
		runs: newRuns()}
}

// consumer returns a consumer of the rig's topic in its group whose
// handler takes pause, fails a record's first attempt and completes the
// next ones.
func (r *rig) consumer(t *testing.T, pause time.Duration, opts ...kgo.Opt) *kafka.Consumer {
	t.Helper()
	p := r.policy
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: r.c.brokers, Group: r.group,
		Topics: map[string]kafka.TopicOptions{r.topic: {Partitions: r.partitions}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t),
			// Every record fails once: not a retry storm to spread.
			DisableRetryBudget: true},
		ShutdownTimeout: 10 * time.Second,
		ClientOptions:   opts})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		id := string(j.Payload)
		r.runs.ran(id, j.Attempt)
		if pause > 0 {
			time.Sleep(pause) // real time passing: a handler that takes a while, so faults land mid-batch
		}
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		r.runs.complete(id)
		return nil
	})
	return cons
}

// produce produces n records prefix-0000... spread evenly over the
// partitions, and returns their ids.
func (r *rig) produce(t *testing.T, prefix string, n int) []string {
	t.Helper()
	cl := r.c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ids := make([]string, n)
	rs := make([]*kgo.Record, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
		rec, err := kafka.NewRecord(r.topic, "job", []byte(ids[i]), []byte(ids[i]))
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = int32(i) % r.partitions
		rs[i] = rec
	}
	r.c.produce(t, cl, rs...)
	return ids
}

// tierTopics returns the names of the rig's tiers, and their topic IDs
// (requests from version 13 of Produce, 10 of OffsetCommit, name topics
// by ID).
func (r *rig) tierTopics(t *testing.T) (map[string]bool, map[[16]byte]bool) {
	t.Helper()
	names := map[string]bool{}
	var list []string
	for _, d := range r.topo.Tiers {
		names[r.topo.TierTopic(d)] = true
		list = append(list, r.topo.TierTopic(d))
	}
	ids := map[[16]byte]bool{}
	eventually(t, "the tiers' topic IDs", 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Just created: the metadata may not list them all yet.
		details, err := r.adm.ListTopics(ctx, list...)
		if err != nil {
			return false
		}
		for _, d := range details {
			if d.Err != nil {
				return false
			}
			ids[[16]byte(d.ID)] = true
		}
		return len(details) == len(list)
	})
	return names, ids
}

// settled reports whether the group committed, on every partition of
// every topic of the topology it consumes (all but the DLT), the
// partition's end offset: every record produced was handled and settled,
// and nothing more will be produced.
func (r *rig) settled(t *testing.T) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var consumed []string
	for _, topic := range r.topo.Topics() {
		if topic != r.topo.DLT() {
			consumed = append(consumed, topic)
		}
	}
	ends, err := r.adm.ListEndOffsets(ctx, consumed...)
	if err != nil {
		return false, err.Error()
	}
	committed, err := r.adm.FetchOffsets(ctx, r.group)
	if err != nil {
		return false, err.Error()
	}
	var behind []string
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			behind = append(behind, fmt.Sprintf("%s/%d: %v", o.Topic, o.Partition, o.Err))
			return
		}
		if o.Offset <= 0 {
			return
		}
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			at = c.At
		}
		if at < o.Offset {
			behind = append(behind, fmt.Sprintf("%s/%d committed %d of %d", o.Topic, o.Partition, at, o.Offset))
		}
	})
	sort.Strings(behind)
	return len(behind) == 0, strings.Join(behind, ", ")
}

// waitSettled waits until settled.
func (r *rig) waitSettled(t *testing.T, within time.Duration) {
	t.Helper()
	testwait.Watch(t, "the group's commits to reach the end offsets (nothing committed means every record "+
		"runs again after a restart)", within, func() (bool, string) { return r.settled(t) })
}

// exactlyOnce fails the test for every record of ids that did not run
// its first attempt exactly once and its second exactly once.
func (r *rig) exactlyOnce(t *testing.T, ids []string) {
	t.Helper()
	bad := 0
	for _, id := range ids {
		a1, a2, a3, done := r.runs.count(id, 1), r.runs.count(id, 2), r.runs.count(id, 3), r.runs.completions(id)
		if a1 != 1 || a2 != 1 || a3 != 0 || done != 1 {
			if bad++; bad <= 10 {
				t.Errorf("%s: attempt 1 ran %d times, attempt 2 %d, attempt 3 %d, completed %d; want 1, 1, 0, 1",
					id, a1, a2, a3, done)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d records in all", bad)
	}
}

// deadLetters returns how many records the DLT holds.
func (r *rig) deadLetters(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, r.topo.DLT())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += max(o.Offset, 0) })
	return n
}

// TestFailedProduce: while the cluster refuses the produces of retries to
// the tiers, with retriable errors (the client retries them itself) and
// non-retriable ones (the consumer retries the produce), no record is
// lost and none runs twice: a record's offset is marked only once its
// retry is in the tier.
func TestFailedProduce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	const n = 200
	rg := newRig(t, c, 3)
	ids := rg.produce(t, "rec", n)
	tierNames, tierIDs := rg.tierTopics(t)

	// The first 12 produce requests to the tiers fail: one in four with
	// INVALID_RECORD (not retriable: the produce fails), the others with
	// NOT_LEADER_FOR_PARTITION or NOT_ENOUGH_REPLICAS (retriable).
	const refuse = 12
	var seen, retriable, fatal atomic.Int64
	c.fake.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if !tierNames[rt.Topic] && !tierIDs[rt.TopicID] {
				return nil, nil, false // not (only) retries: as usual
			}
		}
		k := seen.Add(1)
		if k > refuse {
			c.fake.DropControl()
			return nil, nil, false
		}
		c.fake.KeepControl()
		code := kerr.NotLeaderForPartition.Code
		switch {
		case k%4 == 0:
			code = kerr.InvalidRecord.Code
			fatal.Add(1)
		case k%4 == 2:
			code = kerr.NotEnoughReplicas.Code
			retriable.Add(1)
		default:
			retriable.Add(1)
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	// The client refreshes its metadata before retrying a retriable
	// error, by default at most every 5 s: 9 of them would take 45 s.
	cons := rg.consumer(t, 0, kgo.MetadataMinAge(50*time.Millisecond))
	running(t, cons)
	rg.runs.waitCompleted(t, ids, 60*time.Second)
	rg.waitSettled(t, 30*time.Second)

	if retriable.Load() == 0 || fatal.Load() == 0 {
		t.Fatalf("injected %d retriable and %d non-retriable produce errors: the failures did not take",
			retriable.Load(), fatal.Load())
	}
	rg.exactlyOnce(t, ids)
	s := cons.Stats()[rg.topic]
	t.Logf("injected %d retriable, %d non-retriable produce errors; stats %+v", retriable.Load(), fatal.Load(), s)
	if s.ProduceRetries == 0 {
		t.Errorf("ProduceRetries 0 after %d non-retriable produce errors", fatal.Load())
	}
	if s.Completed != n || s.Retried != n || s.Dead != 0 {
		t.Errorf("stats %+v, want %d completed, %d retried, none dead", s, n, n)
	}
	if d := rg.deadLetters(t); d != 0 {
		t.Errorf("%d dead letters, want none", d)
	}
}

// commitFaults makes the cluster refuse the group's offset commits while
// on is set, and counts the commits it refused and let through.
type commitFaults struct {
	on                atomic.Bool
	refused, accepted atomic.Int64
}

// refuseCommits installs f on the cluster: a refused commit gets
// NOT_COORDINATOR (retriable, every second refusal: the client retries it
// at once, to the same refusal while on) or GROUP_AUTHORIZATION_FAILED
// (not retriable: the commit fails) on each of its partitions.
func refuseCommits(c *testCluster, group string) *commitFaults {
	f := &commitFaults{}
	c.fake.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false
		}
		if !f.on.Load() {
			f.accepted.Add(1)
			return nil, nil, false
		}
		c.fake.KeepControl()
		code := kerr.GroupAuthorizationFailed.Code
		if f.refused.Add(1)%2 == 0 {
			code = kerr.NotCoordinator.Code
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return f
}

// TestFailedCommit: commits refused for a while are retried at the next
// tick, nothing runs twice while the consumer keeps running, and the
// group's offsets catch up. Then, with every commit refused, a batch is
// handled, the consumer stops (its final commit refused) and a new one
// starts in the group: the records settled since the last commit run
// again, those committed before do not, and every record completed.
func TestFailedCommit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	const n = 200
	rg := newRig(t, c, 3)
	faults := refuseCommits(c, rg.group)
	first := rg.produce(t, "first", n)

	// Phase 1: commits refused until the consumer tried twice (a commit
	// refused is tried again at the next tick).
	faults.on.Store(true)
	cons := rg.consumer(t, 0)
	stop := running(t, cons)
	eventually(t, "two commits refused", 30*time.Second, func() bool { return faults.refused.Load() >= 2 })
	faults.on.Store(false)
	rg.runs.waitCompleted(t, first, 60*time.Second)
	rg.waitSettled(t, 30*time.Second)
	if faults.refused.Load() == 0 {
		t.Fatal("no offset commit was refused: the consumer did not commit while they were")
	}
	t.Logf("phase 1: refused %d commits, accepted %d", faults.refused.Load(), faults.accepted.Load())
	rg.exactlyOnce(t, first)
	if t.Failed() {
		return
	}

	// Phase 2: every commit refused, the final one too; a new consumer
	// takes over from the offsets committed in phase 1.
	refusedBefore := faults.refused.Load()
	faults.on.Store(true)
	second := rg.produce(t, "second", n/2)
	rg.runs.waitCompleted(t, second, 60*time.Second)
	stop()
	if faults.refused.Load() == refusedBefore {
		t.Fatal("no commit refused in phase 2: the final commit did not happen")
	}
	before := rg.runs.snapshot(append(append([]string(nil), first...), second...))
	faults.on.Store(false)
	running(t, rg.consumer(t, 0))
	rg.waitSettled(t, 60*time.Second)

	if missing := rg.runs.missing(second); len(missing) > 0 {
		t.Errorf("%d records never completed: %v", len(missing), missing)
	}
	// What phase 1 committed does not run again.
	again := 0
	for _, id := range first {
		for a, k := range before[id] {
			if now := rg.runs.count(id, a); now != k {
				if again++; again <= 10 {
					t.Errorf("%s: attempt %d ran %d times after the restart, though committed before it", id, a, now-k)
				}
			}
		}
	}
	// What the refused commits did not save runs again.
	reran := 0
	for _, id := range second {
		if rg.runs.count(id, 1) > before[id][1] || rg.runs.count(id, 2) > before[id][2] {
			reran++
		}
	}
	dupDone, dupRuns := rg.runs.duplicates(second)
	t.Logf("phase 2: %d of %d records ran again after the restart; %d duplicate completions, %d duplicate runs",
		reran, len(second), dupDone, dupRuns)
	if reran == 0 {
		t.Errorf("no record of the second batch ran again after the restart, though no commit was accepted: " +
			"the injection did not take")
	}
	if d := rg.deadLetters(t); d != 0 {
		t.Errorf("%d dead letters, want none", d)
	}
}

// TestRebalanceMidRun: a second consumer joins the group halfway through
// 400 records on 4 partitions; every record completes, none dies, and the
// duplicates (completions beyond one per record) stay within the records
// in flight at the rebalance: the partitions given up commit what they
// settled. It injects nothing, so it runs on kfake and on a real broker
// alike (a real group coordinator's rebalance).
func TestRebalanceMidRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const n = 400
	rg := newRig(t, c, 4)
	ids := rg.produce(t, "rec", n)
	hb := kgo.HeartbeatInterval(100 * time.Millisecond)

	a := rg.consumer(t, 10*time.Millisecond, hb)
	running(t, a)
	eventually(t, "half the records completed", 60*time.Second, func() bool { return rg.runs.total.Load() >= n/2 })
	b := rg.consumer(t, 10*time.Millisecond, hb)
	running(t, b)
	rg.runs.waitCompleted(t, ids, 60*time.Second)
	rg.waitSettled(t, 60*time.Second)

	sa, sb := a.Stats()[rg.topic], b.Stats()[rg.topic]
	dupDone, dupRuns := rg.runs.duplicates(ids)
	t.Logf("%d duplicate completions, %d duplicate runs; first consumer %+v; second %+v", dupDone, dupRuns, sa, sb)
	if sb.Consumed == 0 {
		t.Errorf("the second consumer consumed nothing: no rebalance happened")
	}
	if sa.Dead+sb.Dead != 0 || rg.deadLetters(t) != 0 {
		t.Errorf("%d dead letters, want none", rg.deadLetters(t))
	}
	if dupDone > n/10 {
		t.Errorf("%d duplicate completions, want at most %d: a partition given up did not commit what it settled",
			dupDone, n/10)
	}
}

// TestBrokerRestart: the broker (kfake, persisting to disk) shuts down
// while records are failing and being retried, and comes back on the same
// port; no record is lost, those produced after the restart included.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := newCluster(t, kfake.DataDir(dir))
	c.needFake(t)
	addr := c.fake.ListenAddrs()[0]
	var port int
	if i := strings.LastIndexByte(addr, ':'); i < 0 {
		t.Fatalf("listen address %q", addr)
	} else if _, err := fmt.Sscan(addr[i+1:], &port); err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	const n = 200
	rg := newRig(t, c, 3)
	ids := rg.produce(t, "before", n)

	hook := &requestHook{}
	cons := rg.consumer(t, 5*time.Millisecond, kgo.WithHooks(hook))
	stop := running(t, cons)
	// A quarter of the runs in: first attempts still failing, their
	// retries to produce, the tiers to consume.
	eventually(t, "a quarter of the runs", 60*time.Second, func() bool { return rg.runs.started.Load() >= n/2 })
	c.fake.Close()
	t.Logf("broker down after %d runs, %d completions", rg.runs.started.Load(), rg.runs.total.Load())
	// The broker stays down while the consumer's requests fail: until
	// it failed to connect three times.
	failed := hook.dialFailures.Load()
	eventually(t, "the consumer failing to reach the stopped broker", 30*time.Second, func() bool {
		return hook.dialFailures.Load() >= failed+3
	})
	again, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.Ports(port))
	if err != nil {
		t.Fatalf("restart the broker on port %d: %v", port, err)
	}
	t.Cleanup(again.Close)
	c.fake = again
	t.Logf("broker up after %d runs, %d completions", rg.runs.started.Load(), rg.runs.total.Load())
	if rg.runs.total.Load() >= n {
		t.Fatal("every record completed while the broker was down: the restart tested nothing")
	}
	ids = append(ids, rg.produce(t, "after", n/2)...)

	rg.runs.waitCompleted(t, ids, 60*time.Second)
	rg.waitSettled(t, 60*time.Second)
	dupDone, dupRuns := rg.runs.duplicates(ids)
	t.Logf("stats %+v; %d duplicate completions, %d duplicate runs", cons.Stats()[rg.topic], dupDone, dupRuns)
	if d := rg.deadLetters(t); d != 0 {
		t.Errorf("%d dead letters, want none", d)
	}
	stop() // while the restarted broker runs: the cleanups close it first
}

// TestTooLargeRetry: the retry of a record that fits its main topic is
// too large for the tier once redrive's headers are added (the tier's
// max.message.bytes, set for real); it is not tried forever: its history
// is dropped, then it goes to the DLT as too_large, and the records
// behind it run. (MESSAGE_TOO_LARGE was retried forever, holding the
// partition.)
func TestTooLargeRetry(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			topic := newTopic(t)
			p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
			cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
				Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
				Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
			if err != nil {
				t.Fatal(err)
			}
			// The tier takes 1000 bytes at most, from its creation.
			topo, _ := cons.Topology(topic)
			adm := kadm.NewClient(c.client(t))
			limit := "1000"
			resp, err := adm.CreateTopics(context.Background(), 1, -1, map[string]*string{"max.message.bytes": &limit},
				topo.TierTopic(10*time.Millisecond))
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			c.ensure(t, cons, topic)
			var mu sync.Mutex
			ran := map[string]int{}
			cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
				r, _ := kafka.RecordOf(ctx)
				mu.Lock()
				ran[string(r.Key)]++
				mu.Unlock()
				if string(r.Key) == "big" {
					return errors.New("a long error message that the history carries along with the record, " +
						"making its retry larger than the tier takes")
				}
				return nil
			})
			running(t, cons)
			cl := c.client(t)
			// Random: the producer compresses.
			value := make([]byte, 940)
			for i := range value {
				value[i] = byte(rand.IntN(256))
			}
			big := &kgo.Record{Topic: topic, Key: []byte("big"), Value: value,
				Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}}}
			after, _ := kafka.NewRecord(topic, "job", 1, []byte("after"))
			c.produce(t, cl, big, after)
			dead := c.readCommitted(t, topo.DLT(), 1)
			if r := dead[0]; string(r.Key) != "big" || header(r, kafka.HeaderReason) != kafka.ReasonTooLarge ||
				len(r.Value) != 940 || header(r, kafka.HeaderHistoryDropped) == "" {
				t.Errorf("dead letter %s: reason %q, %d bytes, history dropped %q; want big, too_large, its value, its history dropped",
					r.Key, header(r, kafka.HeaderReason), len(r.Value), header(r, kafka.HeaderHistoryDropped))
			}
			eventually(t, "the record behind it ran", 30*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ran["after"] > 0
			})
		})
	}
}

// TestUnproducibleStopsRun: when neither the retry, nor the dead letter,
// nor the dead letter without its value fits (tier and DLT limited to
// 200 bytes), Run stops with the error instead of retrying for ever.
func TestUnproducibleStopsRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := cons.Topology(topic)
	limit := "200"
	resp, err := kadm.NewClient(c.client(t)).CreateTopics(context.Background(), 1, -1,
		map[string]*string{"max.message.bytes": &limit}, topo.TierTopic(10*time.Millisecond), topo.DLT())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error { return errors.New("fails") })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	r, _ := kafka.NewRecord(topic, "job", 1, []byte("k"))
	c.produce(t, c.client(t), r)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cannot be produced") {
			t.Fatalf("Run: %v, want the record that cannot be produced", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run still running")
	}
}
