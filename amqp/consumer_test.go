package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// TestClassicRetryProfile is the classic RabbitMQ scenario exactly: the
// default policy (3 retries, 1 s doubling, 30 s cap, +-10% jitter); a
// message that always fails runs 4 times, 1, 2 and 4 s apart (+-10%),
// then lands in <queue>-dlq and is not requeued to the work queue.
func TestClassicRetryProfile(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Concurrency: 2}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := cons.Topology(q)
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 40 * time.Second, 400 * time.Second}; fmt.Sprint(topo.Tiers) != fmt.Sprint(want) {
		t.Fatalf("tiers %v, want %v", topo.Tiers, want)
	}
	seen := newAttempts()
	var histories sync.Map
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		n := seen.add(j.IdempotencyKey, time.Now())
		histories.Store(n, j.History)
		if j.Attempt != n {
			t.Errorf("attempt %d is the job's attempt %d", n, j.Attempt)
		}
		return errors.New("scanner unavailable")
	})
	stop := running(t, cons)
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := pub.Enqueue(context.Background(), "scan", map[string]string{"file": "a.pdf"}, redrive.InQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the message is in the DLQ", 20*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 1 })
	requireSettled(t, c, topo, stop) // no fifth attempt can come
	at := seen.of(id)
	if len(at) != 4 {
		t.Fatalf("%d attempts, want 4", len(at))
	}
	h, _ := histories.Load(4)
	hist := h.([]redrive.Event)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		gap := at[i+1].Sub(at[i])
		chosen := time.Duration(hist[i].Delay)
		lo, hi := time.Duration(float64(want)*0.9), time.Duration(float64(want)*1.1)
		if chosen < lo || chosen > hi {
			t.Errorf("retry %d: delay chosen %v, want %v +-10%%", i+1, chosen, want)
		}
		if gap < chosen-2*time.Millisecond {
			t.Errorf("retry %d ran early: %v after the attempt before, its delay is %v", i+1, gap, chosen)
		}
		if gap > hi+time.Second {
			t.Errorf("retry %d ran %v after the attempt before, far beyond %v", i+1, gap, hi)
		}
		t.Logf("retry %d: delay %v, gap %v (late by %v)", i+1, chosen, gap, gap-chosen)
	}
	if n := depth(t, c, q); n != 0 {
		t.Errorf("%d messages back in the work queue, want 0", n)
	}
	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("peek: %v, %d messages", err, len(dead))
	}
	d := dead[0]
	if d.Reason != retry.ReasonExhausted || d.Class != "unknown" || d.Error != "scanner unavailable" || d.Attempts != 4 ||
		d.Origin != q || d.MessageID != id || len(d.History) != 4 || d.History[3].Kind != store.EventDead {
		t.Errorf("dead letter %+v", d)
	}
	if st := cons.Stats(); st.Retried != 3 || st.Dead != 1 || st.Completed != 0 {
		t.Errorf("stats %+v", st)
	}
}

// e2eJob is the payload of the end-to-end jobs: fail the first Fail
// attempts, or every attempt permanently.
type e2eJob struct {
	N         int  `json:"n"`
	Fail      int  `json:"fail"`
	Permanent bool `json:"permanent"`
}

// TestEndToEnd runs 1,000 jobs through a consumer: some succeed at once,
// some fail transiently once or twice, some more often than the policy
// allows, some permanently. Every job ends completed or in the DLQ
// exactly as its handler dictates, and no retry runs before the delay its
// policy chose.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second,
		Jitter: retry.JitterProportional, JitterFactor: 0.1}
	// A fifth of the jobs failing at once is a retry storm the retry
	// budget would spread out; this test checks the policy's delays.
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Concurrency: 32}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	seen := newAttempts()
	var mu sync.Mutex
	late := []time.Duration{}
	completed := map[int]int{}
	redrive.Handle(cons, "e2e", func(ctx context.Context, j *redrive.Job, args e2eJob) error {
		now := time.Now()
		n := seen.add(j.IdempotencyKey, now)
		if n != j.Attempt {
			t.Errorf("job %d: attempt %d, but %d were seen", args.N, j.Attempt, n)
		}
		if j.Attempt > 1 {
			prev := seen.of(j.IdempotencyKey)[j.Attempt-2]
			chosen := time.Duration(j.History[len(j.History)-1].Delay)
			gap := now.Sub(prev)
			if gap < chosen-2*time.Millisecond {
				t.Errorf("job %d attempt %d ran %v after the one before; its delay was %v", args.N, j.Attempt, gap, chosen)
			}
			mu.Lock()
			late = append(late, gap-chosen)
			mu.Unlock()
		}
		switch {
		case args.Permanent:
			return redrive.Permanent(errors.New("bad document"))
		case j.Attempt <= args.Fail:
			return fmt.Errorf("transient failure %d", j.Attempt)
		}
		mu.Lock()
		completed[args.N]++
		mu.Unlock()
		return nil
	})
	stop := running(t, cons)
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const total = 1000
	wantDead := map[int]string{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range total {
		job := e2eJob{N: i}
		switch i % 5 {
		case 0:
			job.Permanent = true
			wantDead[i] = retry.ReasonPermanent
		case 1:
			job.Fail = 1
		case 2:
			job.Fail = 2
		case 3:
			job.Fail = 10
			wantDead[i] = retry.ReasonExhausted
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := pub.Enqueue(context.Background(), "e2e", job, redrive.InQueue(q), redrive.IdempotencyKey(fmt.Sprint("job-", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	dlqName := q + "-dlq"
	eventually(t, "every job completed or dead", 60*time.Second, func() bool {
		mu.Lock()
		n := len(completed)
		mu.Unlock()
		return n == total-len(wantDead) && depth(t, c, dlqName) == len(wantDead)
	})
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop) // no job can complete a second time
	mu.Lock()
	for i := range total {
		_, dead := wantDead[i]
		if got := completed[i]; (dead && got != 0) || (!dead && got != 1) {
			t.Errorf("job %d completed %d times (dead: %v)", i, got, dead)
		}
	}
	mu.Unlock()
	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), len(wantDead))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		var args e2eJob
		if err := json.Unmarshal(d.Body, &args); err != nil {
			t.Fatal(err)
		}
		wantAttempts := 1
		if wantDead[args.N] == retry.ReasonExhausted {
			wantAttempts = 4
		}
		if d.Reason != wantDead[args.N] || d.Attempts != wantAttempts || len(d.History) != wantAttempts {
			t.Errorf("job %d dead with reason %q after %d attempts (%d events); want %q after %d", args.N, d.Reason, d.Attempts,
				len(d.History), wantDead[args.N], wantAttempts)
		}
		if got := len(seen.of(d.MessageID)); got != wantAttempts {
			t.Errorf("job %d ran %d times, want %d", args.N, got, wantAttempts)
		}
	}
	for i := range total {
		want := 1
		switch i % 5 {
		case 1:
			want = 2
		case 2:
			want = 3
		case 3:
			want = 4
		}
		if got := len(seen.of(fmt.Sprint("job-", i))); got != want {
			t.Errorf("job %d ran %d times, want %d", i, got, want)
		}
	}
	sort.Slice(late, func(a, b int) bool { return late[a] < late[b] })
	t.Logf("%d retries; lateness p50 %v, p99 %v, max %v; stats %+v", len(late), late[len(late)/2], late[len(late)*99/100],
		late[len(late)-1], cons.Stats())
}

// TestBrokerRestartsConnections closes every connection of a dedicated
// virtual host three times while jobs flow: the publisher and the
// consumer recover by themselves and no job is lost (duplicates are
// allowed; the test counts and reports them).
func TestBrokerClosesConnections(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	vhost := fmt.Sprintf("redrive-fault-%d", time.Now().UnixNano())
	rabbitmqctl(t, "add_vhost", vhost)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
	rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	vurl := strings.TrimSuffix(url, "/") + "/" + vhost
	c := dial(t, vurl)
	q := newQueue(t, c)
	p := retry.Policy{MaxRetries: 5, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Concurrency: 16}},
		Executor:     redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)},
		PublishRetry: &retry.Policy{MaxRetries: 50, Initial: 50 * time.Millisecond, Multiplier: 2, MaxDelay: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	// Faults come at the 150th, 300th and 450th handler runs, while that
	// handler works: it waits until every connection was closed. The
	// enqueues keep at most 64 ahead of the runs, so that they spread
	// over the faults.
	const total = 600
	faultAt := map[int64]bool{150: true, 300: true, 450: true}
	faultWanted, faulted := make(chan struct{}), make(chan struct{})
	stopFaults := make(chan struct{})
	credit := make(chan struct{}, 64)
	for range cap(credit) {
		credit <- struct{}{}
	}
	var mu sync.Mutex
	done := map[int]int{}
	var runs atomic.Int64
	redrive.Handle(cons, "job", func(ctx context.Context, j *redrive.Job, n int) error {
		if faultAt[runs.Add(1)] {
			select {
			case faultWanted <- struct{}{}:
				<-faulted
			case <-stopFaults:
			}
		}
		select {
		case credit <- struct{}{}:
		default:
		}
		if j.Attempt == 1 && n%3 == 0 {
			return errors.New("fails once")
		}
		mu.Lock()
		done[n]++
		mu.Unlock()
		return nil
	})
	running(t, cons)
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{
		Retry: &retry.Policy{MaxRetries: 50, Initial: 50 * time.Millisecond, Multiplier: 2, MaxDelay: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	faults := make(chan int, 1)
	go func() {
		n := 0
		defer func() { faults <- n }()
		for range len(faultAt) {
			select {
			case <-stopFaults:
				return
			case <-faultWanted:
				rabbitmqctl(t, "close_all_connections", "--vhost", vhost, "redrive fault test")
				n++
				faulted <- struct{}{}
			}
		}
	}()
	defer close(stopFaults)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < total; i += 4 {
				select {
				case <-credit:
				case <-time.After(60 * time.Second): // a liveness bound
					t.Errorf("enqueue %d: no handler ran for 60s", i)
					return
				}
				if _, err := pub.Enqueue(context.Background(), "job", i, redrive.InQueue(q)); err != nil {
					t.Errorf("enqueue %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	eventually(t, "every job completed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == total
	})
	n := testwait.Recv(t, "the three faults", 60*time.Second, faults)
	// The duplicates redelivered after the faults that came by now are
	// counted; they are not waited for.
	mu.Lock()
	dups := 0
	for i := range total {
		if done[i] == 0 {
			t.Errorf("job %d lost", i)
		}
		dups += done[i] - 1
	}
	mu.Unlock()
	if n != 3 {
		t.Errorf("%d faults injected, want 3", n)
	}
	if dlq := depth(t, c, q+"-dlq"); dlq != 0 {
		t.Errorf("%d messages in the DLQ", dlq)
	}
	if c.Reconnects() < 3 {
		t.Errorf("the connection reconnected %d times, want at least 3", c.Reconnects())
	}
	t.Logf("%d jobs, %d faults, %d reconnects, %d handler runs, %d duplicate completions; consumer %+v", total, n, c.Reconnects(),
		runs.Load(), dups, cons.Stats())
}

// TestUndecodable: a message whose redrive headers cannot be read, and a
// body its typed handler cannot decode, go to the DLQ at once with reason
// undecodable.
func TestUndecodable(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	redrive.Handle(cons, "typed", func(ctx context.Context, j *redrive.Job, n int) error { calls.Add(1); return nil })
	running(t, cons)
	publishRaw(t, c, q, amqp091.Publishing{Type: "typed", MessageId: "bad-header", Body: []byte("1"),
		Headers: amqp091.Table{amqp.HeaderAttempt: "two"}})
	publishRaw(t, c, q, amqp091.Publishing{Type: "typed", MessageId: "bad-body", Body: []byte(`"not a number"`)})
	publishRaw(t, c, q, amqp091.Publishing{Type: "typed", MessageId: "binary", ContentType: "application/octet-stream",
		Body: []byte{0xff, 0x00, 0xfe}})
	eventually(t, "three dead letters", 20*time.Second, func() bool { return depth(t, c, q+"-dlq") == 3 })
	dlq, _ := amqp.NewDLQ(c, q)
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if d.Reason != redrive.ReasonUndecodable || d.Class != "permanent" {
			t.Errorf("%s: reason %q class %q, want undecodable, permanent", d.MessageID, d.Reason, d.Class)
		}
		if d.MessageID == "binary" && string(d.Body) != "\xff\x00\xfe" {
			t.Errorf("binary body changed: %q", d.Body)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("the handler ran %d times", calls.Load())
	}
}

// TestBreakerDefersWithoutAttempt: while the dependency's breaker is
// open, a message is put back through a delay queue without using an
// attempt, and runs once the breaker lets a probe through.
func TestBreakerDefersWithoutAttempt(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	reg := breaker.NewRegistry(breaker.Config{Failures: 1, Window: time.Minute, BreakDuration: 2 * time.Second})
	br := reg.Get("crm")
	_ = br.Do(context.Background(), func(context.Context) error { return errors.New("crm down") })
	if br.State() != breaker.Open {
		t.Fatal("breaker not open")
	}
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Policy: &p, Breakers: reg, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redrive.Job, 1)
	cons.HandleFunc("sync", func(ctx context.Context, j *redrive.Job) error { got <- j; return nil }, redrive.UsesDependency("crm"))
	running(t, cons)
	publishRaw(t, c, q, amqp091.Publishing{Type: "sync", Body: []byte(`{}`)})
	select {
	case j := <-got:
		if j.Attempt != 1 {
			t.Errorf("ran as attempt %d, want 1: a deferral uses no attempt", j.Attempt)
		}
		deferred := 0
		for _, ev := range j.History {
			if ev.Kind == store.EventDeferred && ev.Reason == "breaker_open:crm" {
				deferred++
			}
		}
		if deferred == 0 {
			t.Errorf("history %+v has no deferral", j.History)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the deferred message never ran")
	}
	eventually(t, "the message is acknowledged", 10*time.Second, func() bool { return cons.Stats().Completed == 1 })
	if st := cons.Stats(); st.Deferred == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestShutdownRequeues: a handler still running at the shutdown timeout
// is canceled and its message goes back to the work queue without using
// an attempt.
func TestShutdownRequeues(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		ShutdownTimeout: 100 * time.Millisecond, Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cons.HandleFunc("slow", func(ctx context.Context, j *redrive.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	publishRaw(t, c, q, amqp091.Publishing{Type: "slow", Body: []byte(`{}`)})
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the message is back in the work queue", 10*time.Second, func() bool { return depth(t, c, q) == 1 })
	ch, _ := c.Channel(context.Background())
	defer ch.Close()
	d, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if _, has := d.Headers[amqp.HeaderAttempt]; has {
		t.Errorf("the released message carries an attempt count: %v", d.Headers)
	}
	if st := cons.Stats(); st.Released != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestTopologyConflict: a work queue that exists with other arguments
// stops the consumer with an error naming the queue.
func TestTopologyConflict(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("x", func(ctx context.Context, j *redrive.Job) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = cons.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "exists with other arguments") || !strings.Contains(err.Error(), q) {
		t.Fatalf("Run = %v, want a conflict naming %s", err, q)
	}
}

// TestQuorumDeliveryLimit: on quorum queues, a message whose consumers
// keep crashing before they decide (here: a foreign consumer that
// requeues it) is dead-lettered by the broker once over the delivery
// limit; and redrive's retries work on quorum queues.
func TestQuorumDeliveryLimit(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	topo := amqp.Topology{Queue: q, Quorum: true, DeliveryLimit: 3, Tiers: []time.Duration{10 * time.Millisecond}}
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, c, q, amqp091.Publishing{Type: "poison", Body: []byte(`{}`)})
	// Each check takes the message, if it is back, and returns it.
	testwait.Until(t, "the poison message, returned 3 times, to be dead-lettered", 20*time.Second, func() bool {
		if depth(t, c, q+"-dlq") > 0 {
			return true
		}
		d, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			d.Nack(false, true)
		}
		return false
	})
	dlq, _ := amqp.NewDLQ(c, q)
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), 1)
	if err != nil || len(dead) != 1 || dead[0].Reason != "delivery_limit" {
		t.Fatalf("dead letter %+v, %v; want the broker's delivery_limit", dead, err)
	}
	// The consumer retries on the same quorum topology.
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Quorum: true, DeliveryLimit: 3}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ok := make(chan int, 1)
	cons.HandleFunc("flaky", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt < 3 {
			return errors.New("not yet")
		}
		ok <- j.Attempt
		return nil
	})
	running(t, cons)
	publishRaw(t, c, q, amqp091.Publishing{Type: "flaky", Body: []byte(`{}`)})
	select {
	case n := <-ok:
		if n != 3 {
			t.Errorf("completed on attempt %d", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the flaky message never completed")
	}
}

// TestPublisherUnroutable: a mandatory message no queue takes is a
// failed publish, retried, then returned to the caller.
func TestPublisherUnroutable(t *testing.T) {
	t.Parallel()
	c := dial(t)
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{
		Retry: &retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(context.Background(), "", fmt.Sprintf("no-such-queue-%d", time.Now().UnixNano()), amqp091.Publishing{Body: []byte("x")})
	var ret *amqp.ReturnedError
	if !errors.As(err, &ret) || ret.Code != 312 {
		t.Fatalf("Publish = %v, want a ReturnedError (312 NO_ROUTE)", err)
	}
	if !strings.Contains(err.Error(), "failed 3 times") {
		t.Errorf("error %q does not say how many attempts failed", err)
	}
	// The channel still works for routable messages.
	q := newQueue(t, c)
	ch, _ := c.Channel(context.Background())
	ch.QueueDeclare(q, false, true, false, false, nil)
	ch.Close()
	if err := pub.Publish(context.Background(), "", q, amqp091.Publishing{Body: []byte("y")}); err != nil {
		t.Errorf("publish to an existing queue: %v", err)
	}
}

// TestDialGivesUp: a broker that never answers exhausts the reconnect
// policy and Dial says how many attempts failed.
func TestDialGivesUp(t *testing.T) {
	t.Parallel()
	_, err := amqp.Dial(context.Background(), "amqp://guest:secret@127.0.0.1:1/", amqp.ConnOptions{Logger: quiet(),
		Reconnect: &retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "3 attempts failed") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Dial = %v, want 3 attempts failed, without the password", err)
	}
	if _, err := amqp.Dial(context.Background(), "http://x", amqp.ConnOptions{}); err == nil {
		t.Error("Dial accepted an http URL")
	}
}

// TestEnqueueMany: a pipelined batch of jobs is confirmed and consumed
// whole; a batch with one id twice is refused; a batch to a queue that
// does not exist fails message by message, after the policy's retries.
func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Concurrency: 20}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var got sync.Map
	redrive.Handle(cons, "n", func(ctx context.Context, j *redrive.Job, n int) error { got.Store(n, j.IdempotencyKey); return nil })
	topo, _ := cons.Topology(q)
	ch, _ := c.Channel(context.Background())
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{
		Retry: &retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]redrive.Request, 500)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "n", Payload: i, Queue: q}
	}
	reqs[7].IdempotencyKey = "seven"
	ids, err := pub.EnqueueMany(context.Background(), reqs)
	if err != nil || len(ids) != 500 || ids[7] != "seven" {
		t.Fatalf("EnqueueMany = %d ids, %v", len(ids), err)
	}
	if n := depth(t, c, q); n != 500 {
		t.Fatalf("%d messages in the queue after a confirmed batch, want 500", n)
	}
	running(t, cons)
	eventually(t, "every job ran", 20*time.Second, func() bool {
		n := 0
		got.Range(func(_, _ any) bool { n++; return true })
		return n == 500
	})
	if id, _ := got.Load(7); id != "seven" {
		t.Errorf("job 7 ran with message id %v", id)
	}
	dup := []redrive.Request{{Kind: "n", Queue: q, IdempotencyKey: "k"}, {Kind: "n", Queue: q, IdempotencyKey: "k"}}
	if _, err := pub.EnqueueMany(context.Background(), dup); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("a batch with one id twice: %v", err)
	}
	missing := []redrive.Request{{Kind: "n", Queue: q + "-nowhere"}, {Kind: "n", Queue: q + "-nowhere"}, {Kind: "n", Queue: q}}
	_, err = pub.EnqueueMany(context.Background(), missing)
	var ret *amqp.ReturnedError
	if !errors.As(err, &ret) || !strings.Contains(err.Error(), "message 0") || !strings.Contains(err.Error(), "message 1") ||
		strings.Contains(err.Error(), "message 2") {
		t.Errorf("a batch to a missing queue: %v", err)
	}
}

// TestQuorumShutdownDoesNotCount: on a quorum queue, a message released
// by shutdowns (its handler canceled, no attempt used) more times than
// the delivery limit stays in its queue: a release is not a failed
// delivery, and is not dead-lettered as delivery_limit.
func TestQuorumShutdownDoesNotCount(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	qo := amqp.QueueOptions{Quorum: true, DeliveryLimit: 1, Tiers: []time.Duration{10 * time.Millisecond}}
	for cycle := range 3 {
		cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: qo},
			ShutdownTimeout: 50 * time.Millisecond, Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{}, 1)
		cons.HandleFunc("slow", func(ctx context.Context, j *redrive.Job) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		if cycle == 0 {
			publishRaw(t, c, q, amqp091.Publishing{Type: "slow", Body: []byte(`{}`)})
		}
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: the message was not delivered (DLQ depth %d)", cycle, depth(t, c, q+"-dlq"))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		eventually(t, "the message back in its queue", 10*time.Second, func() bool {
			return depth(t, c, q) == 1 || depth(t, c, q+"-dlq") > 0
		})
		if n := depth(t, c, q+"-dlq"); n != 0 {
			t.Fatalf("after %d shutdowns, the released message was dead-lettered", cycle+1)
		}
	}
}

// TestDeclareWorkQueueLast: the work queue is declared only once every
// queue its rejections go to exists and is bound. A consumer may reject
// a message the moment the work queue exists; dead-lettered to a failure
// exchange not yet bound to its queue, the broker drops it. Here the
// declaration fails part-way (a delay queue exists with other arguments):
// the work queue must not exist.
func TestDeclareWorkQueueLast(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	topo := amqp.Topology{Queue: q, FailureExchange: q + "-failures", Tiers: []time.Duration{100 * time.Millisecond}}
	t.Cleanup(func() {
		if ch, err := c.Channel(context.Background()); err == nil {
			ch.ExchangeDelete(topo.FailureExchange, false, false)
			ch.Close()
		}
	})
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topo.TierQueue(100*time.Millisecond), true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err == nil || !strings.Contains(err.Error(), "exists with other arguments") {
		t.Fatalf("Declare = %v, want a conflict on the delay queue", err)
	}
	ch, err = c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
		t.Fatalf("the work queue %s exists though its failure route was never completed: "+
			"a message rejected now would be dropped by the broker", q)
	}
}
