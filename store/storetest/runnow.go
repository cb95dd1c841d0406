package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testRunNow: a scheduled job (delayed, or waiting for a retry) becomes
// pending and due at once, keeping its attempt, retry count and history;
// a pending job is answered unchanged; a running or finished job is
// ErrConflict and an unknown one ErrNotFound, changing nothing; the job
// counts follow.
func testRunNow(x *h) {
	now := at(0)
	jobs := x.enqueue(now,
		store.NewJob{Queue: "rn", Kind: "k", RunAt: at(time.Hour)}, // delayed
		store.NewJob{Queue: "rn", Kind: "k"},                       // retries
		store.NewJob{Queue: "rn", Kind: "k"},                       // runs
	)
	delayed, retrying, running := jobs[0], jobs[1], jobs[2]
	got := x.fetch(store.FetchParams{Queue: "rn", Limit: 2, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if len(got) != 2 {
		x.t.Fatalf("fetched %d jobs, want 2", len(got))
	}
	for _, j := range got {
		if j.ID == retrying.ID {
			x.finish(store.Outcome{JobID: j.ID, Queue: "rn", Attempt: 1, Lease: j.Lease, Worker: "w", Kind: store.Retry, At: at(time.Second),
				RunAt: at(time.Hour), Error: "boom", Event: &store.Event{Kind: store.EventRetry, Attempt: 1, At: now, Error: "boom"}})
		}
	}
	if x.get(running.ID).State != store.Running {
		x.t.Fatalf("job %d is not running", running.ID)
	}
	x.checkCounts("before")

	later := at(2 * time.Second)
	for _, id := range []int64{delayed.ID, retrying.ID} {
		before := clone(x.get(id))
		if before.State != store.Scheduled {
			x.t.Fatalf("job %d is %s, want scheduled", id, before.State)
		}
		j, err := x.s.RunNow(x.ctx, id, later)
		if err != nil {
			x.t.Fatalf("RunNow(%d): %v", id, err)
		}
		x.checkJob(fmt.Sprintf("RunNow(%d) result", id), j, x.get(id))
		want := clone(before)
		want.State, want.RunAt = store.Pending, later
		x.checkJob(fmt.Sprintf("job %d after RunNow", id), x.get(id), want)
	}
	x.checkCounts("after RunNow")
	// A pending job: unchanged.
	before := clone(x.get(delayed.ID))
	if j, err := x.s.RunNow(x.ctx, delayed.ID, at(3*time.Second)); err != nil || j.State != store.Pending || !j.RunAt.Equal(later) {
		x.t.Errorf("RunNow of a pending job: %+v, %v; want it unchanged", j, err)
	}
	x.checkJob("pending job after RunNow", x.get(delayed.ID), before)

	refuse := func(what string, id int64, target error) {
		x.t.Helper()
		var before *store.Job
		if id != missingID {
			before = clone(x.get(id))
		}
		j, err := x.s.RunNow(x.ctx, id, later)
		if j != nil || err == nil {
			x.t.Errorf("%s: RunNow(%d) = %v, %v; want an error", what, id, j, err)
		}
		x.checkErr(what, err, target)
		if before != nil {
			x.checkJob(what+": job after the refusal", x.get(id), before)
		}
	}
	refuse("running job", running.ID, store.ErrConflict)
	refuse("unknown job", missingID, store.ErrNotFound)
	g := x.get(running.ID)
	x.finish(completeOf(g, at(time.Second)))
	refuse("completed job", running.ID, store.ErrConflict)

	// Both are due now: the retrying one keeps its attempt count.
	leased := x.fetch(store.FetchParams{Queue: "rn", Limit: 10, Now: later, LeaseUntil: later.Add(time.Minute), Worker: "w"})
	x.checkIDSet("fetched after RunNow", jobIDs(leased), []int64{delayed.ID, retrying.ID})
	for _, j := range leased {
		if j.ID == retrying.ID && (j.Attempt != 2 || j.RetryCount != 1) {
			x.t.Errorf("retrying job leased with attempt %d, retry count %d; want 2, 1", j.Attempt, j.RetryCount)
		}
	}
	if h := x.get(retrying.ID).History; len(h) != 1 || h[0].Kind != store.EventRetry {
		x.t.Errorf("retrying job's history after RunNow: %+v, want its retry event", h)
	}
	x.checkCounts("after the fetch")
}

// testRunNowConcurrent: RunNow races fetches on goroutines, over jobs
// scheduled an hour ahead. Whatever the interleaving, the model holds: a
// job is leased only after a RunNow of it succeeded, and once; a RunNow
// that succeeds returns a pending job due at its time; once a RunNow of
// a job is refused (it was leased) none succeeds again; a refusal is
// only ErrConflict; at the end every job made due was leased and the
// others are still scheduled; the job counts follow.
func testRunNowConcurrent(x *h) {
	const n, runners, fetchers = 120, 2, 2
	now := at(0)
	var nj []store.NewJob
	for range n {
		nj = append(nj, store.NewJob{Queue: "rnc", Kind: "k", RunAt: at(time.Hour)})
	}
	jobs := x.enqueue(now, nj...)
	index := map[int64]int{}
	for i, j := range jobs {
		index[j.ID] = i
	}
	var (
		mu      sync.Mutex
		errs    []string
		madeDue = make([]bool, n)
		leased  = make([]int, n)
		done    atomic.Bool
		wg      sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for f := range fetchers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(f), 3))
			for !done.Load() {
				got, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "rnc", Limit: 1 + r.IntN(4), Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: fmt.Sprintf("f%d", f)})
				if err != nil {
					fail("Fetch: %v", err)
					return
				}
				mu.Lock()
				for _, j := range got {
					i := index[j.ID]
					if !madeDue[i] {
						errs = append(errs, fmt.Sprintf("job %d leased before a RunNow of it succeeded", j.ID))
					}
					leased[i]++
				}
				mu.Unlock()
			}
		})
	}
	var rw sync.WaitGroup
	for s := range runners {
		rw.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 5))
			refused := map[int]bool{}
			for range n {
				i := s + runners*r.IntN(n/runners) // each runner its own jobs
				// Record the success before the job can be fetched: the
				// model's order is the store's (RunNow, then Fetch).
				mu.Lock()
				was := madeDue[i]
				madeDue[i] = true
				mu.Unlock()
				j, err := x.s.RunNow(x.ctx, jobs[i].ID, at(time.Second))
				switch {
				case err == nil:
					if refused[i] {
						fail("RunNow of job %d succeeded after it was refused", jobs[i].ID)
					}
					if j.State != store.Pending || !j.RunAt.Equal(at(time.Second)) && !was {
						fail("RunNow(%d) returned %s due %s", jobs[i].ID, j.State, j.RunAt)
					}
				case errors.Is(err, store.ErrConflict):
					refused[i] = true
					if !was {
						fail("RunNow of job %d refused before any succeeded", jobs[i].ID)
					}
				default:
					fail("RunNow(%d): %v", jobs[i].ID, err)
					if !was {
						mu.Lock()
						madeDue[i] = false
						mu.Unlock()
					}
				}
			}
		})
	}
	rw.Wait()
	// Drain: every job made due is leased within a few more fetches.
	deadline := time.Now().Add(time.Minute) // a liveness bound only
	for {
		mu.Lock()
		missing := 0
		for i := range n {
			if madeDue[i] && leased[i] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	done.Store(true)
	wg.Wait()
	for _, e := range errs {
		x.t.Error(e)
	}
	for i, j := range jobs {
		switch g := x.get(j.ID); {
		case leased[i] > 1:
			x.t.Errorf("job %d leased %d times", j.ID, leased[i])
		case madeDue[i] && (leased[i] != 1 || g.State != store.Running):
			x.t.Errorf("job %d was made due: leased %d times, %s; want leased once, running", j.ID, leased[i], g.State)
		case !madeDue[i] && (g.State != store.Scheduled || !g.RunAt.Equal(at(time.Hour))):
			x.t.Errorf("job %d was never made due but is %s due %s", j.ID, g.State, g.RunAt)
		}
	}
	x.checkCounts("after the race")
}

// testRunNowOverdue: RunNow of a scheduled job already due (an overdue
// retry in a busy queue) keeps its place: its run_at is not moved later
// to now, behind the jobs that fell due after it, so run now never makes
// a job wait longer.
func testRunNowOverdue(x *h) {
	overdue := x.enqueue(at(0), store.NewJob{Queue: "rno", Kind: "k", RunAt: at(10 * time.Second)})[0]
	later := x.enqueue(at(20*time.Second), store.NewJob{Queue: "rno", Kind: "k"})[0]
	if g := x.get(overdue.ID); g.State != store.Scheduled {
		x.t.Fatalf("job %d is %s, want scheduled", overdue.ID, g.State)
	}
	now := at(30 * time.Second)
	j, err := x.s.RunNow(x.ctx, overdue.ID, now)
	if err != nil {
		x.t.Fatalf("RunNow(%d): %v", overdue.ID, err)
	}
	if j.State != store.Pending || !j.RunAt.Equal(at(10*time.Second)) {
		x.t.Errorf("RunNow of a job due at %s at %s: %s due %s; want pending, due at %s still",
			at(10*time.Second), now, j.State, j.RunAt, at(10*time.Second))
	}
	got := x.fetch(store.FetchParams{Queue: "rno", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if len(got) != 1 || got[0].ID != overdue.ID {
		x.t.Errorf("first fetch after RunNow leased %v, want job %d (due before job %d)", jobIDs(got), overdue.ID, later.ID)
	}
	x.checkCounts("after the fetch")
}

// testRunNowRaces: RunNow races cancels, fetches and the outcomes of the
// leased jobs (a retry back an hour ahead, or a completion), on random
// jobs from goroutines. What must hold whatever the interleaving: RunNow
// succeeds only with a pending job and fails only with ErrConflict; no
// job is leased again after a Cancel ended it (its lease token at the
// cancel is the last one); no (job, lease token) is leased twice; every
// outcome of a lease applies (no lease expires here); at the end each
// job's attempt and lease token count its leases, nothing is running
// and the job counts follow.
func testRunNowRaces(x *h) {
	const n, operators, workers = 60, 2, 2
	var nj []store.NewJob
	for range n {
		nj = append(nj, store.NewJob{Queue: "rnr", Kind: "k", RunAt: at(time.Hour)})
	}
	jobs := x.enqueue(at(0), nj...)
	index := map[int64]int{}
	for i, j := range jobs {
		index[j.ID] = i
	}
	var (
		mu         sync.Mutex
		errs       []string
		leases     = make([]int, n)
		seen       = map[[2]int64]bool{}
		canceledAt = make([]int64, n) // lease token when a Cancel ended the job, -1 if none
		stop       atomic.Bool
		wg, ow     sync.WaitGroup
	)
	for i := range canceledAt {
		canceledAt[i] = -1
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	now := at(time.Second)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			worker := fmt.Sprintf("w%d", w)
			for !stop.Load() {
				got, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "rnr", Limit: 1 + r.IntN(3), Now: now, LeaseUntil: at(time.Hour), Worker: worker})
				if err != nil {
					fail("Fetch: %v", err)
					return
				}
				var outs []store.Outcome
				mu.Lock()
				for _, j := range got {
					i := index[j.ID]
					k := [2]int64{j.ID, j.Lease}
					if seen[k] {
						errs = append(errs, fmt.Sprintf("job %d leased twice with token %d", j.ID, j.Lease))
					}
					seen[k] = true
					leases[i]++
					if c := canceledAt[i]; c >= 0 && j.Lease > c {
						errs = append(errs, fmt.Sprintf("job %d leased (token %d) after a cancel ended it at token %d", j.ID, j.Lease, c))
					}
					if r.IntN(3) == 0 {
						outs = append(outs, completeOf(j, now))
					} else {
						outs = append(outs, retryOf(j, now, at(time.Hour), failure.Transient, "again"))
					}
				}
				mu.Unlock()
				if len(outs) == 0 {
					runtime.Gosched()
					continue
				}
				applied, err := x.s.Finish(x.ctx, outs)
				if err != nil {
					fail("Finish: %v", err)
					return
				}
				for k, ok := range applied {
					if !ok {
						fail("outcome of job %d (token %d) not applied", outs[k].JobID, outs[k].Lease)
					}
				}
			}
		})
	}
	for o := range operators {
		ow.Go(func() {
			r := rand.New(rand.NewPCG(uint64(o), 11))
			for range 3 * n {
				i := r.IntN(n)
				id := jobs[i].ID
				if r.IntN(6) == 0 {
					j, err := x.s.Cancel(x.ctx, id, now)
					switch {
					case err == nil && j.State == store.Canceled:
						mu.Lock()
						if canceledAt[i] < 0 {
							canceledAt[i] = j.Lease
						}
						mu.Unlock()
					case err == nil || errors.Is(err, store.ErrConflict):
					default:
						fail("Cancel(%d): %v", id, err)
					}
					continue
				}
				j, err := x.s.RunNow(x.ctx, id, now)
				switch {
				case err == nil:
					if j.State != store.Pending || j.RunAt.After(now) {
						fail("RunNow(%d) returned %s due %s", id, j.State, j.RunAt)
					}
				case errors.Is(err, store.ErrConflict):
				default:
					fail("RunNow(%d): %v", id, err)
				}
			}
		})
	}
	ow.Wait()
	// Drain: the workers lease every job made due (a liveness bound only).
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st := x.stats()
		if st.Jobs["rnr"][store.Pending] == 0 && st.Jobs["rnr"][store.Running] == 0 {
			break
		}
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	for _, e := range errs {
		x.t.Error(e)
	}
	for i, j := range jobs {
		g := x.get(j.ID)
		if g.Attempt != leases[i] || g.Lease != int64(leases[i]) {
			x.t.Errorf("job %d: attempt %d, lease token %d after %d leases", j.ID, g.Attempt, g.Lease, leases[i])
		}
		switch g.State {
		case store.Scheduled, store.Completed, store.Canceled:
		default:
			x.t.Errorf("job %d is %s at the end", j.ID, g.State)
		}
		if canceledAt[i] >= 0 && g.State != store.Canceled {
			x.t.Errorf("job %d was canceled but is %s", j.ID, g.State)
		}
	}
	x.checkCounts("after the races")
}
