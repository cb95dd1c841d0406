package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// recorder is a handler that records the jobs it ran; a job whose payload
// is "block" waits until release is closed.
type recorder struct {
	mu      sync.Mutex
	ran     []int64
	started chan int64
	release chan struct{}
}

func newRecorder() *recorder {
	return &recorder{started: make(chan int64, 100), release: make(chan struct{})}
}

func (r *recorder) handle(ctx context.Context, j *redrive.Job) error {
	r.mu.Lock()
	r.ran = append(r.ran, j.ID)
	r.mu.Unlock()
	r.started <- j.ID
	if string(j.Payload) == `"block"` {
		select {
		case <-r.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *recorder) ranAny(ids ...int64) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, id := range r.ran {
		for _, want := range ids {
			if id == want {
				out = append(out, id)
			}
		}
	}
	return out
}

// enqueueN enqueues n jobs of kind "rec" through c and returns their ids.
func enqueueN(t *testing.T, c *redrive.Client, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		j, err := c.Enqueue(context.Background(), "rec", nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	return ids
}

// checkWaiting fails unless none of the jobs ran and each is pending.
// The worker gets a few of its poll intervals to misbehave first.
func (e *env) checkWaiting(r *recorder, settle time.Duration, ids ...int64) {
	e.t.Helper()
	time.Sleep(settle) // real time: the worker's poll intervals pass, and nothing may run
	if ran := r.ranAny(ids...); len(ran) > 0 {
		e.t.Fatalf("jobs %v of a paused queue ran", ran)
	}
	for _, id := range ids {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if j.State != redrive.Pending || j.Attempt != 0 {
			e.t.Fatalf("job %d of a paused queue is %s (attempt %d), want pending and untouched", id, j.State, j.Attempt)
		}
	}
}

// waitLog waits until the worker logged msg for queue (a liveness guard).
func waitLog(t *testing.T, buf *syncBuffer, msg, queue string) {
	t.Helper()
	waitLogged(t, buf, fmt.Sprintf("the worker to log %q for queue %q", msg, queue), func(l map[string]any) bool {
		return l["msg"] == msg && l["queue"] == queue
	})
}

// TestPauseQueueLocal: a pause through the worker's own Client applies at
// once (the poll interval is an hour): the running job finishes normally,
// new jobs wait pending, and the resume starts them at once.
func TestPauseQueueLocal(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: time.Hour})
	r := newRecorder()
	e.worker.HandleFunc("rec", r.handle)
	e.start()
	ctx := context.Background()

	blocked, err := e.client.Enqueue(ctx, "rec", "block")
	if err != nil {
		t.Fatal(err)
	}
	if id := <-r.started; id != blocked.ID {
		t.Fatalf("started job %d, want %d", id, blocked.ID)
	}
	q, err := e.client.PauseQueue(ctx, redrive.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Paused || q.PausedAt == nil || q.Name != redrive.DefaultQueue || q.Jobs[redrive.Running] != 1 || len(q.Jobs) != len(store.States) {
		t.Fatalf("PauseQueue = %+v", q)
	}
	waiting := enqueueN(t, e.client, 3)
	close(r.release) // the running job finishes normally
	e.waitState(blocked.ID, redrive.Completed)
	e.checkWaiting(r, 100*time.Millisecond, waiting...)

	qs, err := e.client.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || !qs[0].Paused || qs[0].Jobs[redrive.Pending] != 3 || qs[0].Jobs[redrive.Completed] != 1 || qs[0].Jobs[redrive.Dead] != 0 {
		t.Fatalf("Queues = %+v", qs)
	}

	q, err = e.client.ResumeQueue(ctx, redrive.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	if q.Paused || q.PausedAt != nil {
		t.Fatalf("ResumeQueue = %+v", q)
	}
	for _, id := range waiting {
		e.waitState(id, redrive.Completed)
	}
}

// TestPauseQueueOtherClient: a pause made by another Client reaches the
// worker (at once, the Client being on the same store; that of another
// process would at the worker's next refresh); wake-ups from its own
// Client do not bypass it; the other Client's resume starts the jobs
// again. Other queues keep working throughout.
func TestPauseQueueOtherClient(t *testing.T) {
	var buf syncBuffer
	const poll = 50 * time.Millisecond
	e := newEnv(t, redrive.WorkerOptions{PollInterval: poll, Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
		Queues: map[string]int{redrive.DefaultQueue: 4, "other": 2}})
	r := newRecorder()
	e.worker.HandleFunc("rec", r.handle)
	e.start()
	ctx := context.Background()
	remote := redrive.NewClient(e.store, redrive.ClientOptions{Logger: quietLogger()})

	first := enqueueN(t, remote, 1)
	e.waitState(first[0], redrive.Completed)

	start := time.Now()
	if _, err := remote.PauseQueue(ctx, redrive.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	waitLog(t, &buf, "queue paused: fetching none of its jobs until it is resumed", redrive.DefaultQueue)
	t.Logf("the worker saw the pause after %s (poll interval %s)", time.Since(start), poll)

	waiting := append(enqueueN(t, remote, 2), enqueueN(t, e.client, 2)...) // the latter wake the worker
	other, err := e.client.Enqueue(ctx, "rec", nil, redrive.InQueue("other"))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(other.ID, redrive.Completed)
	e.checkWaiting(r, 5*poll, waiting...)

	if _, err := remote.ResumeQueue(ctx, redrive.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	for _, id := range waiting {
		e.waitState(id, redrive.Completed)
	}
	waitLog(t, &buf, "queue resumed", redrive.DefaultQueue)
}

// TestPauseQueueBeforeStart: a queue paused before the worker starts (and
// before it has any job) is not fetched from at all: the worker reads the
// paused queues before its first fetch.
func TestPauseQueueBeforeStart(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: time.Hour})
	r := newRecorder()
	e.worker.HandleFunc("rec", r.handle)
	ctx := context.Background()
	remote := redrive.NewClient(e.store, redrive.ClientOptions{Logger: quietLogger()})
	q, err := remote.PauseQueue(ctx, redrive.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Paused || q.Jobs[redrive.Pending] != 0 {
		t.Fatalf("PauseQueue of an empty queue = %+v", q)
	}
	waiting := enqueueN(t, remote, 3)
	e.start()
	e.checkWaiting(r, 100*time.Millisecond, waiting...)
	// The worker's own Client resumes it at once (no refresh for an hour).
	if _, err := e.client.ResumeQueue(ctx, redrive.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	for _, id := range waiting {
		e.waitState(id, redrive.Completed)
	}
}

// TestQueuesValidation: names are required and bounded like Enqueue's;
// Queues lists a queue paused before it has jobs, with every state
// counted.
func TestQueuesValidation(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	for _, name := range []string{"", strings.Repeat("q", 201)} {
		if _, err := e.client.PauseQueue(ctx, name); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("PauseQueue(%d bytes): %v, want ErrInvalid", len(name), err)
		}
		if _, err := e.client.ResumeQueue(ctx, name); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("ResumeQueue(%d bytes): %v, want ErrInvalid", len(name), err)
		}
	}
	if _, err := e.client.PauseQueue(ctx, strings.Repeat("q", 200)); err != nil {
		t.Errorf("PauseQueue of a 200-byte name: %v", err)
	}
	qs, err := e.client.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || !qs[0].Paused || len(qs[0].Jobs) != len(store.States) {
		t.Fatalf("Queues = %+v", qs)
	}
	for _, s := range store.States {
		if n, ok := qs[0].Jobs[s]; !ok || n != 0 {
			t.Errorf("Jobs[%s] = %d, %v; want 0, present", s, n, ok)
		}
	}
	if _, err := e.client.Enqueue(ctx, "k", nil, redrive.InQueue("b")); err != nil {
		t.Fatal(err)
	}
	qs, err = e.client.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "b" || qs[0].Paused || qs[0].Jobs[redrive.Pending] != 1 || qs[1].Name != strings.Repeat("q", 200) {
		t.Fatalf("Queues = %+v", qs)
	}
}
