package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestReleaseAnnouncedAfterCommit: workflow jobs completed by concurrent
// Finish calls of one store, in random batches and orders, release
// their workflows' final jobs, each in a queue of its own; another store
// on the schema (another process) listens. Every release must be heard
// there, by the NOTIFY the first store sends after the Finish's commit
// (the job is due when it is heard: never announced early), once: the
// notifications heard for a queue are exactly the store's NOTIFYs of it,
// so the Finish's own commit notified nothing.
func TestReleaseAnnouncedAfterCommit(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>5))
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	other := open(t, schema)
	defer other.Close()
	var (
		mu    sync.Mutex
		sent  = map[string]int{}
		heard = map[string]int{}
		bad   []string
	)
	s.SetReleaseSent(func(queues []string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad = append(bad, fmt.Sprintf("NOTIFY of %v: %v", queues, err))
		}
		for _, q := range queues {
			sent[q]++
		}
	})
	// The listener hands what it hears to a goroutine that checks the
	// final job is due (Listen's callback must return quickly).
	ctx := t.Context()
	notices := make(chan string, 1000)
	listening := make(chan struct{})
	lctx, stopListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		first := true
		other.Listen(lctx, func(q string) {
			if q == "" {
				if first {
					first = false
					close(listening)
				}
				return
			}
			notices <- q
		})
	}()
	defer func() { stopListen(); <-listened }()
	<-listening
	checked := make(chan struct{})
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	go func() {
		defer close(checked)
		for q := range notices {
			if !strings.HasPrefix(q, "final-") { // the enqueues' notices, the last one
				mu.Lock()
				heard[q]++
				mu.Unlock()
				continue
			}
			var state string
			err := other.Pool().QueryRow(ctx, `SELECT state FROM `+jobs+` WHERE queue = $1`, q).Scan(&state)
			mu.Lock()
			heard[q]++
			if err != nil || state != string(store.Pending) {
				bad = append(bad, fmt.Sprintf("heard %s: its job is %q (%v), want pending", q, state, err))
			}
			mu.Unlock()
		}
	}()

	const flows, workers = 40, 4
	now := time.Now().UTC()
	for f := range flows {
		var w store.NewWorkflow
		var after []string
		for d := range 1 + rng.IntN(6) {
			after = append(after, fmt.Sprint("d", d))
			w.Jobs = append(w.Jobs, store.WorkflowNode{Name: after[d], Job: store.NewJob{Queue: "deps", Kind: "dep", Payload: []byte(`{}`)}})
		}
		w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "final", Job: store.NewJob{Queue: fmt.Sprint("final-", f), Kind: "final", Payload: []byte(`{}`)}, After: after})
		if _, err := s.EnqueueWorkflow(ctx, w, now); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := s.Fetch(ctx, store.FetchParams{Queue: "deps", Limit: 1000, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	rng.Shuffle(len(leased), func(i, j int) { leased[i], leased[j] = leased[j], leased[i] })
	// Each worker completes its share in batches of 1 to 4.
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for k := range workers {
		var share []*store.Job
		for i := k; i < len(leased); i += workers {
			share = append(share, leased[i])
		}
		sizes := make([]int, 0, len(share))
		for n := 0; n < len(share); {
			m := min(1+rng.IntN(4), len(share)-n)
			sizes = append(sizes, m)
			n += m
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range sizes {
				outs := make([]store.Outcome, m)
				for i, j := range share[:m] {
					outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Complete, At: time.Now()}
				}
				share = share[m:]
				if _, err := s.Finish(ctx, outs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testwait.Until(t, "every release heard by the other store", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for q := range heard {
			if strings.HasPrefix(q, "final-") {
				n++
			}
		}
		return n == flows
	})
	s.WaitAnnounced()
	// A last notice, sent after every NOTIFY, is heard after them all.
	if _, err := s.Pool().Exec(ctx, `SELECT pg_notify($1, 'end')`, s.Channel()); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the last notice heard", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return heard["end"] == 1
	})
	stopListen()
	<-listened
	close(notices)
	<-checked
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	for f := range flows {
		q := fmt.Sprint("final-", f)
		if heard[q] != 1 || sent[q] != 1 {
			t.Errorf("%s: heard %d notifications, the store sent %d NOTIFYs; want 1 each", q, heard[q], sent[q])
		}
	}
}

// TestReleaseInCommitStillNotifies: a transaction that completes
// workflow jobs without settling them (releaseInCommit: as another
// writer, or a process of an older version) is done by the trigger at
// its commit, which notifies as before.
func TestReleaseInCommitStillNotifies(t *testing.T) {
	defer postgres.SetReleaseInCommit(true)()
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	ctx := t.Context()
	var sends int
	s.SetReleaseSent(func([]string, error) { sends++ })
	heard := make(chan string, 10)
	lctx, stopListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		s.Listen(lctx, func(q string) { heard <- q })
	}()
	defer func() { stopListen(); <-listened }()
	if q := testwait.Recv(t, "the listener's start", 30*time.Second, heard); q != "" {
		t.Fatalf("heard %q first, want the connection's empty notice", q)
	}
	now := time.Now().UTC()
	w := store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "a", Job: store.NewJob{Queue: "deps", Kind: "dep", Payload: []byte(`{}`)}},
		{Name: "b", Job: store.NewJob{Queue: "after", Kind: "final", Payload: []byte(`{}`)}, After: []string{"a"}}}}
	if _, err := s.EnqueueWorkflow(ctx, w, now); err != nil {
		t.Fatal(err)
	}
	if q := testwait.Recv(t, "the enqueue's notice", 30*time.Second, heard); q != "deps" {
		t.Fatalf("heard %q, want deps", q)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "deps", Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d jobs, %v", len(got), err)
	}
	j := got[0]
	if _, err := s.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Complete, At: now}}); err != nil {
		t.Fatal(err)
	}
	if q := testwait.Recv(t, "the release's notice", 30*time.Second, heard); q != "after" {
		t.Fatalf("heard %q, want after", q)
	}
	s.WaitAnnounced()
	if sends != 0 {
		t.Fatalf("the store sent %d NOTIFYs of its own, want none: the commit notified", sends)
	}
}

// TestReleasePlainQueueSkipsSettle: a Finish whose settle found nothing
// (plain jobs) spares its queue the settle for a while; a workflow job
// of that queue completed meanwhile is still released, by the trigger
// at the commit, which notifies as before: nothing is lost.
func TestReleasePlainQueueSkipsSettle(t *testing.T) {
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	ctx := t.Context()
	var sends int
	s.SetReleaseSent(func([]string, error) { sends++ })
	var hooked []string
	defer s.OnRelease(func(q string) { hooked = append(hooked, q) })()
	heard, up := make(chan string, 10), make(chan string, 10)
	lctx, stopListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		s.Listen(lctx, func(q string) {
			switch q {
			case "":
				up <- q
			case "after":
				heard <- q
			}
		})
	}()
	defer func() { stopListen(); <-listened }()
	testwait.Recv(t, "the listener's start", 30*time.Second, up)
	now := time.Now().UTC()
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "after", Kind: "probe", Payload: []byte(`{}`)}}, now); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, "the probe's notice", 30*time.Second, heard)
	complete := func(j *store.Job) {
		t.Helper()
		if _, err := s.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Complete, At: now}}); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(queue string, want int) []*store.Job {
		t.Helper()
		got, err := s.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil || len(got) != want {
			t.Fatalf("fetch %s: %d jobs (%v), want %d", queue, len(got), err, want)
		}
		return got
	}
	w := store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "a", Job: store.NewJob{Queue: "deps", Kind: "dep", Payload: []byte(`{}`)}},
		{Name: "b", Job: store.NewJob{Queue: "after", Kind: "final", Payload: []byte(`{}`)}, After: []string{"a"}}}}
	if _, err := s.EnqueueWorkflow(ctx, w, now); err != nil {
		t.Fatal(err)
	}
	dep := fetch("deps", 1)[0]
	// A plain job of the queue first: its settle finds nothing.
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "deps", Kind: "plain", Payload: []byte(`{}`)}}, now); err != nil {
		t.Fatal(err)
	}
	complete(fetch("deps", 1)[0])
	fetch("after", 1) // the probe
	complete(dep)
	if q := testwait.Recv(t, "the release's notice", 30*time.Second, heard); q != "after" {
		t.Fatalf("heard %q", q)
	}
	fetch("after", 1) // the released job
	s.WaitAnnounced()
	if sends != 0 || len(hooked) != 0 {
		t.Fatalf("the release was announced by the store (%d NOTIFYs, hooks heard %v): want the trigger's, the queue's settle skipped", sends, hooked)
	}
}
