package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// resendWorker is the model of one remote worker: the leases it knows
// it holds, and the lease call it must send again (its answer lost).
type resendWorker struct {
	name    string
	held    map[store.Lease]bool
	request string // the call to send again; "": none
	calls   int
}

// TestRemoteLeaseResendRandomized plays lease calls whose answers are
// lost at random (the call never reaching serve, the answer cut after
// serve wrote it, serve seeing the worker gone), each followed by a copy
// sent again with its request id and the worker's held leases, to one
// of two serve processes on one store (a fleet), and outcomes, against a
// model: no job is handed to two workers, or twice to one, at once; once
// a copy sent again is answered, the worker knows every job the store
// says it holds (none stranded); every job completes exactly once.
func TestRemoteLeaseResendRandomized(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { playResend(t, seed) })
	}
}

func playResend(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 3333))
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	sa, sb := openStorePair(t)
	p := retry.Policy{MaxRetries: 1000, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, Jitter: retry.JitterNone}
	var serves []*redrive.RemoteWorkers
	var first *redrive.Client
	for _, st := range []store.Store{sa, sb} {
		c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
		redrive.SetClock(c, clock.now)
		ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: &p, Logger: quietLogger(), Now: clock.now, DisableRetryBudget: true})
		serves = append(serves, redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: time.Minute, Logger: quietLogger()}))
		if first == nil {
			first = c
		}
	}
	const jobs = 40
	completed := map[int64]int{}
	for range jobs {
		j, err := first.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		completed[j.ID] = 0
	}
	workers := []*resendWorker{{name: "py-1@a", held: map[store.Lease]bool{}}, {name: "node-2@b", held: map[store.Lease]bool{}}}
	holder := func(id int64) (string, bool) {
		for _, w := range workers {
			for l := range w.held {
				if l.JobID == id {
					return w.name, true
				}
			}
		}
		return "", false
	}
	errGone := errors.New("the worker went away")
	done := 0
	for step := 0; done < jobs; step++ {
		if step > 5000 {
			t.Fatalf("%d of %d jobs completed after %d steps", done, jobs, step)
		}
		w := workers[rng.IntN(len(workers))]
		rw := serves[rng.IntN(len(serves))]
		if rng.IntN(5) < 2 && len(w.held) > 0 { // an outcome of a job held
			var l store.Lease
			for l = range w.held {
				break
			}
			res, err := rw.Outcomes(ctx, w.name, []redrive.RemoteOutcome{{ID: l.JobID, Lease: l.Token, Kind: redrive.RemoteComplete}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Err != nil || res[0].State != store.Completed {
				t.Fatalf("step %d: the outcome of %v held by %s: %v, %s", step, l, w.name, res[0].Err, res[0].State)
			}
			delete(w.held, l)
			completed[l.JobID]++
			done++
			continue
		}
		q := redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: w.name}, Queues: []string{"q"},
			Kinds: []string{"k"}, Max: 1 + rng.IntN(4)}
		resend := w.request != ""
		if resend {
			q.Request, q.Resend = w.request, true
			for l := range w.held {
				q.Held = append(q.Held, l)
			}
		} else {
			w.calls++
			q.Request = fmt.Sprintf("r%d", w.calls)
		}
		cut := rng.IntN(10)
		if cut < 2 { // lost on its way: serve never saw it
			w.request = q.Request
			continue
		}
		got, err := rw.LeaseAnswer(ctx, q, func([]*redrive.Job) error {
			if cut == 2 {
				return errGone // serve saw the worker gone: handed back
			}
			return nil
		})
		if cut == 2 {
			if !errors.Is(err, errGone) {
				t.Fatalf("step %d: lease: %v", step, err)
			}
			w.request = q.Request
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if cut < 5 { // written, then cut on its way
			w.request = q.Request
			continue
		}
		w.request = ""
		for _, j := range got {
			l := store.LeaseOf(j)
			if name, ok := holder(j.ID); ok {
				t.Fatalf("step %d: job %d handed to %s (resend %v) while %s holds it", step, j.ID, w.name, resend, name)
			}
			if completed[j.ID] > 0 {
				t.Fatalf("step %d: job %d handed out once completed", step, j.ID)
			}
			if j.LeaseUntil == nil || !j.LeaseUntil.After(clock.now()) {
				t.Fatalf("step %d: job %d handed out with lease until %v", step, j.ID, j.LeaseUntil)
			}
			w.held[l] = true
		}
		// Answered: the worker knows every job it holds.
		stored, err := sa.Leased(ctx, w.name, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range stored {
			if !w.held[store.LeaseOf(j)] {
				t.Fatalf("step %d: job %d lease %d stranded: %s holds it unknowingly after an answer (resend %v)",
					step, j.ID, j.Lease, w.name, resend)
			}
		}
		if len(stored) != len(w.held) {
			t.Fatalf("step %d: %s holds %d jobs, knows of %d", step, w.name, len(stored), len(w.held))
		}
		if rng.IntN(4) == 0 {
			clock.add(time.Second)
		}
	}
	for id, n := range completed {
		if n != 1 {
			t.Fatalf("job %d completed %d times", id, n)
		}
	}
}

// TestRemoteLeaseResendWhileFirstWaits sends a lease call again while
// its first copy still long-polls in the same serve (a proxy cut the
// worker's connection and kept serve's open): the copy ends the first
// one's wait and answers the job, which the first never hands out.
func TestRemoteLeaseResendWhileFirstWaits(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: time.Minute, Logger: quietLogger()})
	q := redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"}, Queues: []string{"q"},
		Kinds: []string{"k"}, Max: 5, Wait: time.Minute, Request: "call-1"}
	var wg sync.WaitGroup
	var firstGot []*redrive.Job
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The answer is written to a connection the proxy cut: the
		// worker never reads it.
		firstGot, firstErr = rw.LeaseAnswer(ctx, q, func([]*redrive.Job) error { return nil })
	}()
	testwait.Until(t, "the first copy long-polls", 10*time.Second, func() bool { return redrive.RemoteWaiting(rw, "q") == 1 })
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	again := q
	again.Resend, again.Wait = true, 10*time.Second
	got, err := rw.Lease(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("the copy sent again got %v, want job %d", got, j.ID)
	}
	stored, err := st.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != store.Running || stored.Lease != got[0].Lease || stored.Worker != "py-1@a" {
		t.Fatalf("job %d is %s lease %d for %q, the copy got lease %d", j.ID, stored.State, stored.Lease, stored.Worker, got[0].Lease)
	}
	for _, f := range firstGot {
		if f.ID == j.ID && f.Lease == got[0].Lease {
			// Both answers name the same lease: the first went to a cut
			// connection, and only the copy's is read.
			continue
		}
		if f.ID == j.ID {
			t.Fatalf("the first copy handed out lease %d of job %d, the copy lease %d", f.Lease, j.ID, got[0].Lease)
		}
	}
}

// TestRemoteLeaseResendChecks refuses a lease sent again without its
// request id, a held list without resend, a bad request id.
func TestRemoteLeaseResendChecks(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger()})
	base := redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "w"}, Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1}
	for name, mod := range map[string]func(*redrive.LeaseRequest){
		"resend without request": func(q *redrive.LeaseRequest) { q.Resend = true },
		"held without resend":    func(q *redrive.LeaseRequest) { q.Request, q.Held = "a", []store.Lease{{JobID: 1, Token: 1}} },
		"request with a space":   func(q *redrive.LeaseRequest) { q.Request = "a b" },
		"request too long":       func(q *redrive.LeaseRequest) { q.Request = string(make([]byte, 65)) },
		"held too long": func(q *redrive.LeaseRequest) {
			q.Request, q.Resend, q.Held = "a", true, make([]store.Lease, redrive.MaxRemoteHeldList+1)
		},
	} {
		q := base
		mod(&q)
		if _, err := rw.Lease(context.Background(), q); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
