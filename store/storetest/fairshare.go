package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// fairJob is a new job of a fair queue with key key.
func fairJob(queue, key string, runAt time.Time, prio int) store.NewJob {
	return store.NewJob{Queue: queue, Kind: "k", Fair: true, FairKey: key, RunAt: runAt, Priority: prio,
		Payload: raw(fmt.Sprintf(`{"tenant":%q}`, key))}
}

// fairKeys fetches one job at a time from queue at now, n times, and
// returns the key of each (from the payload's tenant; "-" for none
// leased).
func (x *h) fairKeys(queue string, now time.Time, n int, weights map[string]int) []string {
	x.t.Helper()
	var out []string
	for range n {
		got := x.fetch(store.FetchParams{Queue: queue, Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w", FairWeights: weights})
		if len(got) == 0 {
			out = append(out, "-")
			continue
		}
		out = append(out, tenantOf(got[0]))
	}
	return out
}

// tenantOf reads a fair job's key back from its payload.
func tenantOf(j *store.Job) string {
	s := string(j.Payload)
	i := strings.Index(s, `"tenant"`)
	if i < 0 {
		return "?"
	}
	s = s[i+len(`"tenant"`):]
	s = strings.TrimLeft(s, ": ")
	s = strings.TrimPrefix(s, `"`)
	if k := strings.IndexByte(s, '"'); k >= 0 {
		return s[:k]
	}
	return "?"
}

// testFairRoundRobin: a fair queue's due jobs are leased one key at a
// time, in turn, however many one key has waiting; within a key, oldest
// due first.
func testFairRoundRobin(x *h) {
	now := at(0)
	var nj []store.NewJob
	for i := range 50 {
		nj = append(nj, fairJob("fq", "big", at(-time.Hour+time.Duration(i)*time.Second), 0))
	}
	for _, k := range []string{"s1", "s2"} {
		for i := range 3 {
			nj = append(nj, fairJob("fq", k, at(-time.Duration(i)*time.Minute), 0))
		}
	}
	jobs := x.enqueue(now, nj...)
	got := x.fairKeys("fq", now, 12, nil)
	want := []string{"big", "s1", "s2", "big", "s1", "s2", "big", "s1", "s2", "big", "big", "big"}
	if !slices.Equal(got, want) {
		x.t.Fatalf("keys leased one at a time = %v, want %v", got, want)
	}
	// Within a key, oldest due first: the big key's first jobs went
	// first, and s1's were leased newest-enqueued first (they are due
	// earliest).
	for i := range 6 {
		if st := x.get(jobs[i].ID).State; st != store.Running {
			x.t.Errorf("big job %d (due %d of 50) is %s, want running", jobs[i].ID, i+1, st)
		}
	}
	if st := x.get(jobs[6].ID).State; st != store.Pending {
		x.t.Errorf("big job 7 is %s, want pending", st)
	}
	// A batch takes a round of every key, then more rounds.
	x.enqueue(now, fairJob("fq2", "a", now, 0), fairJob("fq2", "a", now, 0), fairJob("fq2", "a", now, 0),
		fairJob("fq2", "a", now, 0), fairJob("fq2", "b", now, 0), fairJob("fq2", "c", now, 0))
	batch := x.fetch(store.FetchParams{Queue: "fq2", Limit: 4, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	count := map[string]int{}
	for _, j := range batch {
		count[tenantOf(j)]++
	}
	if len(batch) != 4 || count["a"] != 2 || count["b"] != 1 || count["c"] != 1 {
		x.t.Errorf("a batch of 4 of keys a (4 due), b (1), c (1) leased %v, want a 2, b 1, c 1", count)
	}
}

// testFairWeights: a key of weight w takes w jobs a round.
func testFairWeights(x *h) {
	now := at(0)
	var nj []store.NewJob
	for range 20 {
		nj = append(nj, fairJob("wq", "a", now, 0), fairJob("wq", "b", now, 0), fairJob("wq", "c", now, 0))
	}
	x.enqueue(now, nj...)
	w := map[string]int{"a": 3, "c": 2}
	got := x.fairKeys("wq", now, 12, w)
	want := []string{"a", "a", "a", "b", "c", "c", "a", "a", "a", "b", "c", "c"}
	if !slices.Equal(got, want) {
		x.t.Fatalf("keys leased one at a time with weights %v = %v, want %v", w, got, want)
	}
	// A batch that ends in the middle of a key's weight: the next fetch
	// gives the key the rest of its weight first.
	batch := x.fetch(store.FetchParams{Queue: "wq", Limit: 2, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w", FairWeights: w})
	if len(batch) != 2 || tenantOf(batch[0]) != "a" || tenantOf(batch[1]) != "a" {
		x.t.Fatalf("batch of 2 leased %v, want a, a", jobIDs(batch))
	}
	got = x.fairKeys("wq", now, 3, w)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		x.t.Errorf("after a batch cut in a's weight, keys = %v, want %v", got, want)
	}
}

// testFairPriority: priorities stay strict in a fair queue: a key's job
// of a higher priority goes before every key's jobs of a lower one, and
// a due job without a fair key of a higher priority goes first too;
// a higher priority's jobs due later hold nothing back.
func testFairPriority(x *h) {
	now := at(0)
	var nj []store.NewJob
	for range 5 {
		nj = append(nj, fairJob("pq", "a", at(-time.Hour), 0))
	}
	nj = append(nj, fairJob("pq", "b", at(-time.Minute), 5), fairJob("pq", "c", at(-time.Minute), 5),
		fairJob("pq", "d", at(time.Hour), 9), // due later: holds nothing back
		store.NewJob{Queue: "pq", Kind: "k", Priority: 7, Payload: raw(`{"tenant":"plain"}`)})
	x.enqueue(now, nj...)
	got := x.fairKeys("pq", now, 6, nil)
	want := []string{"plain", "b", "c", "a", "a", "a"}
	if !slices.Equal(got, want) {
		x.t.Fatalf("keys leased one at a time = %v, want %v", got, want)
	}
	if got := x.fairKeys("pq", at(time.Hour), 2, nil); got[0] != "d" {
		x.t.Errorf("at +1h the first leased is %v, want d (priority 9)", got)
	}
}

// testFairScheduled: a key whose jobs are all due later costs the others
// nothing and is not leased early; once due, it takes its turn. NextDue
// and OldestDue see fair jobs.
func testFairScheduled(x *h) {
	now := at(0)
	var nj []store.NewJob
	for range 40 {
		nj = append(nj, fairJob("sq", "later", at(time.Hour), 0))
	}
	for range 3 {
		nj = append(nj, fairJob("sq", "a", now, 0), fairJob("sq", "b", now, 0))
	}
	x.enqueue(now, nj...)
	if got, err := x.s.OldestDue(x.ctx, []string{"sq"}, now); err != nil || !sameTime(got["sq"], now) {
		x.t.Errorf("OldestDue(sq) = %v, %v; want %s", got, err, fmtTime(now))
	}
	got := x.fairKeys("sq", now, 7, nil)
	want := []string{"a", "b", "a", "b", "a", "b", "-"}
	if !slices.Equal(got, want) {
		x.t.Fatalf("keys leased one at a time = %v, want %v", got, want)
	}
	if next, ok, err := x.s.NextDue(x.ctx, "sq"); err != nil || !ok || !sameTime(next, at(time.Hour)) {
		x.t.Errorf("NextDue(sq) = %s, %v, %v; want %s", fmtTime(next), ok, err, fmtTime(at(time.Hour)))
	}
	x.enqueue(at(time.Hour), fairJob("sq", "a", at(time.Hour), 0))
	got = x.fairKeys("sq", at(time.Hour), 4, nil)
	if n := strings.Count(strings.Join(got, ","), "later"); n != 3 || got[0] == got[1] {
		x.t.Errorf("once due, keys = %v, want later to alternate with a", got)
	}
}

// testFairKept: a retried, snoozed or replayed fair job keeps its key: it
// goes on taking its key's turns, not a turn of its own.
func testFairKept(x *h) {
	now := at(0)
	jobs := x.enqueue(now, fairJob("kq", "a", now, 0), fairJob("kq", "a", now, 0), fairJob("kq", "b", now, 0))
	first := x.fetch(store.FetchParams{Queue: "kq", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if len(first) != 1 || first[0].ID != jobs[0].ID {
		x.t.Fatalf("first fetch leased %v, want job %d", jobIDs(first), jobs[0].ID)
	}
	x.finish(retryOf(first[0], now, now, failure.Transient, "boom"))
	// a's retry is due with a's other job: b's turn comes first, then a's
	// jobs in due order (the retry's run_at is now, the other's now too:
	// id order).
	got := x.fairKeys("kq", now, 3, nil)
	if want := []string{"b", "a", "a"}; !slices.Equal(got, want) {
		x.t.Errorf("after a's retry, keys = %v, want %v", got, want)
	}
	if j := x.get(jobs[0].ID); j.State != store.Running || j.Attempt != 2 {
		x.t.Errorf("retried job: %s attempt %d, want running attempt 2", j.State, j.Attempt)
	}
	if k, ok, err := x.s.JobFairKey(x.ctx, jobs[0].ID); err != nil || !ok || k != "a" {
		x.t.Errorf("JobFairKey(retried job) = %q, %v, %v; want a", k, ok, err)
	}
	plain := x.enqueue(now, store.NewJob{Queue: "kq", Kind: "k"})[0]
	if k, ok, err := x.s.JobFairKey(x.ctx, plain.ID); err != nil || ok {
		x.t.Errorf("JobFairKey(a job without a key) = %q, %v, %v; want none", k, ok, err)
	}
	if _, ok, err := x.s.JobFairKey(x.ctx, 1<<40); err != nil || ok {
		x.t.Errorf("JobFairKey(no such job) = %v, %v; want none", ok, err)
	}
	// A replay's copy keeps its source's key: it takes a's turns.
	all := x.fetch(store.FetchParams{Queue: "kq", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	for _, j := range append(all, x.get(jobs[0].ID), x.get(jobs[1].ID), x.get(jobs[2].ID)) {
		if j.State == store.Running {
			x.finish(completeOf(j, now))
		}
	}
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: store.OperationParams{
		Filter: store.Filter{Queue: "kq", States: []store.State{store.Completed}}, Batch: 10}}, at(time.Minute))
	op = x.claimOp(op.ID, "w1", at(time.Minute))
	x.runOp(op, "w1", 10, at(time.Minute))
	copies := x.listAll(store.Filter{Queue: "kq", States: []store.State{store.Pending}}, 10)
	if len(copies) != 4 {
		x.t.Fatalf("replay made %d copies, want 4", len(copies))
	}
	for _, c := range copies {
		k, ok, err := x.s.JobFairKey(x.ctx, c.ID)
		want := tenantOf(c)
		if c.ReplayOf == plain.ID {
			if ok || err != nil {
				x.t.Errorf("copy of a job without a key: key %q, %v, %v", k, ok, err)
			}
			continue
		}
		if err != nil || !ok || k != want {
			x.t.Errorf("copy %d of %d: key %q, %v, %v; want %q", c.ID, c.ReplayOf, k, ok, err, want)
		}
	}
}

// testFairModel: several workers fetch a fair queue concurrently while
// jobs of random keys, priorities and due times, and jobs without a fair
// key (enqueued by a process not configured fair), are enqueued and time
// moves: every due job is leased exactly once, never before it is due.
// A single worker's sequential fetches are checked against the model
// too: priorities stay strict (no due job waits while one of a lower
// priority is leased), a fetch takes all it wants when that many are
// due, each key (the jobs without a key as one more) gives its oldest
// due jobs first, and at each priority no key that had due jobs
// throughout a run of fetches gets more than two rounds of its weight
// ahead of another (the jobs without a key count as a key of weight 1).
func testFairModel(x *h) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(seed, 4))
	x.t.Logf("seed %d", seed)
	const none = "(none)" // the model's key of the jobs without a fair key
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	weights := map[string]int{"k1": 3, "k4": 2}
	type mjob struct {
		id     int64
		key    string
		prio   int
		runAt  time.Time
		leased bool
	}
	model := map[int64]*mjob{}
	now := at(0)
	enq := func(n int) {
		var nj []store.NewJob
		for range n {
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(3) == 0 {
				k = keys[0] // one key with a backlog
			}
			prio := 0
			if rng.IntN(5) == 0 {
				prio = 1 + rng.IntN(2)
			}
			runAt := now.Add(time.Duration(rng.IntN(20)-10) * time.Second)
			if rng.IntN(5) == 0 {
				nj = append(nj, plainJob("mq", none, runAt, prio))
				continue
			}
			nj = append(nj, fairJob("mq", k, runAt, prio))
		}
		for _, j := range x.enqueue(now, nj...) {
			model[j.ID] = &mjob{id: j.ID, key: tenantOf(j), prio: j.Priority, runAt: j.RunAt}
		}
	}
	check := func(got []*store.Job, dueBy time.Time) {
		for _, j := range got {
			m, ok := model[j.ID]
			switch {
			case !ok:
				x.t.Fatalf("leased job %d the model does not know", j.ID)
			case m.leased:
				x.t.Fatalf("job %d leased twice", j.ID)
			case m.runAt.After(dueBy):
				x.t.Fatalf("job %d leased at %s before it is due (%s)", j.ID, fmtTime(dueBy), fmtTime(m.runAt))
			}
			m.leased = true
		}
	}
	due := func() []*mjob {
		var out []*mjob
		for _, m := range model {
			if !m.leased && !m.runAt.After(now) {
				out = append(out, m)
			}
		}
		return out
	}
	before := func(a, b *mjob) bool { // a is due before b
		return a.runAt.Before(b.runAt) || a.runAt.Equal(b.runAt) && a.id < b.id
	}
	// checkSeq checks a sequential fetch of limit that leased got, with
	// wasDue the due jobs not leased before it.
	checkSeq := func(step, limit int, got []*store.Job, wasDue []*mjob) {
		leased := map[int64]bool{}
		low := math.MaxInt
		for _, j := range got {
			leased[j.ID] = true
			low = min(low, j.Priority)
		}
		oldest := map[[2]string]*mjob{} // per priority and key, the earliest due job left
		for _, m := range wasDue {
			if leased[m.id] {
				continue
			}
			if len(got) < limit {
				x.t.Fatalf("step %d: a fetch of %d leased %d, leaving job %d (key %s, priority %d) due", step, limit, len(got), m.id, m.key, m.prio)
			}
			if m.prio > low {
				x.t.Fatalf("step %d: job %d of priority %d left due while one of priority %d was leased", step, m.id, m.prio, low)
			}
			g := [2]string{fmt.Sprint(m.prio), m.key}
			if o := oldest[g]; o == nil || before(m, o) {
				oldest[g] = m
			}
		}
		for _, j := range got {
			m := model[j.ID]
			if o := oldest[[2]string{fmt.Sprint(m.prio), m.key}]; o != nil && before(o, m) {
				x.t.Fatalf("step %d: job %d (key %s, due %s) leased before job %d of its key and priority, due %s", step, m.id, m.key, fmtTime(m.runAt), o.id, fmtTime(o.runAt))
			}
		}
	}
	w := func(k string) float64 {
		if v, ok := weights[k]; ok {
			return float64(v)
		}
		return 1
	}
	for step := range 30 {
		enq(rng.IntN(40) + 1)
		now = now.Add(time.Duration(rng.IntN(5)) * time.Second)
		if step%2 == 0 {
			// Concurrent workers: leases must not collide.
			var mu sync.Mutex
			var all [][]*store.Job
			var wg sync.WaitGroup
			for w := range 3 {
				limit := 1 + rng.IntN(6) // drawn here: rng is not safe for the goroutines
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "mq", Limit: limit, Now: now,
						LeaseUntil: now.Add(time.Hour), Worker: fmt.Sprintf("w%d", w), FairWeights: weights})
					if err != nil {
						x.t.Errorf("Fetch: %v", err)
						return
					}
					mu.Lock()
					all = append(all, got)
					mu.Unlock()
				}()
			}
			wg.Wait()
			for _, got := range all {
				check(got, now)
			}
			continue
		}
		// A run of sequential fetches with nothing enqueued and the
		// clock still: the keys with due jobs at its end had due jobs
		// throughout, and their starts at each priority, in rounds of
		// their weights, differ by at most two rounds.
		starts := map[[2]string]int{}
		for range rng.IntN(8) + 1 {
			limit := 1 + rng.IntN(5)
			wasDue := due()
			got := x.fetch(store.FetchParams{Queue: "mq", Limit: limit, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "seq", FairWeights: weights})
			check(got, now)
			checkSeq(step, limit, got, wasDue)
			for _, j := range got {
				starts[[2]string{fmt.Sprint(j.Priority), tenantOf(j)}]++
			}
		}
		left := map[[2]string]bool{}
		for _, m := range due() {
			left[[2]string{fmt.Sprint(m.prio), m.key}] = true
		}
		for a := range left {
			for b := range left {
				if a[0] != b[0] {
					continue
				}
				if ra, rb := float64(starts[a])/w(a[1]), float64(starts[b])/w(b[1]); ra-rb > 2 {
					x.t.Fatalf("step %d: at priority %s, key %s started %d (weight %v), key %s %d (weight %v), both with due jobs throughout: %v",
						step, a[0], a[1], starts[a], w(a[1]), b[1], starts[b], w(b[1]), starts)
				}
			}
		}
	}
	// Drain: every due job is leased.
	now = now.Add(time.Minute)
	for range 1000 {
		got := x.fetch(store.FetchParams{Queue: "mq", Limit: 7, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "drain", FairWeights: weights})
		check(got, now)
		if len(got) == 0 {
			break
		}
	}
	for id, m := range model {
		if !m.leased {
			x.t.Errorf("job %d (key %s, due %s) never leased", id, m.key, fmtTime(m.runAt))
		}
	}
}

// testFairInvalid: a fair key without Fair, or one too long, is refused
// and nothing is stored.
func testFairInvalid(x *h) {
	now := at(0)
	for _, nj := range []store.NewJob{
		{Queue: "iq", Kind: "k", FairKey: "a"},
		{Queue: "iq", Kind: "k", Fair: true, FairKey: strings.Repeat("x", store.MaxLimitName+1)},
		{Queue: "iq", Kind: "k", Fair: true, FairKey: "a\x00b"},
	} {
		if _, err := x.s.Enqueue(x.ctx, []store.NewJob{{Queue: "iq", Kind: "k"}, nj}, now); err == nil {
			x.t.Errorf("Enqueue with fair key %q (fair %v) succeeded, want ErrInvalid", nj.FairKey, nj.Fair)
		}
	}
	if n := len(x.listAll(store.Filter{Queue: "iq"}, 100)); n != 0 {
		x.t.Errorf("%d jobs stored after refused enqueues, want 0", n)
	}
}

// FairTwoProcesses checks fair shares across two stores on one database
// (two processes): jobs of a fair queue enqueued through a, fetched
// through b, which was never told the queue is fair (no FairWeights, no
// enqueue of its own), are still leased by round robin over their keys.
// A store's own tests call it with two stores they opened on one
// database; it closes neither.
func FairTwoProcesses(t *testing.T, a, b store.Store) {
	x := &h{t: t, s: a, ctx: t.Context()}
	now := at(0)
	var nj []store.NewJob
	for range 20 {
		nj = append(nj, fairJob("two", "big", at(-time.Hour), 0))
	}
	nj = append(nj, fairJob("two", "small", now, 0), fairJob("two", "small", now, 0))
	x.enqueue(now, nj...)
	y := &h{t: t, s: b, ctx: t.Context()}
	got := y.fairKeys("two", now, 5, nil)
	if want := []string{"big", "small", "big", "small", "big"}; !slices.Equal(got, want) {
		t.Errorf("keys leased one at a time by the other process = %v, want %v", got, want)
	}
}

// plainJob is a new job without a fair key (enqueued by a process not
// configured fair), named name in its payload's tenant.
func plainJob(queue, name string, runAt time.Time, prio int) store.NewJob {
	return store.NewJob{Queue: queue, Kind: "k", RunAt: runAt, Priority: prio, Payload: raw(fmt.Sprintf(`{"tenant":%q}`, name))}
}

// testFairMixedStarve: in a queue holding fair jobs and jobs without a
// fair key (enqueued by a process not configured fair) at the same
// priority, the jobs without a key take turns with the keys, as one more
// key of weight 1 after every key, oldest due first, and are not held
// back by the keys' backlogs; none is leased before it is due, and
// priorities stay strict.
func testFairMixedStarve(x *h) {
	now := at(0)
	var nj []store.NewJob
	for range 10 {
		nj = append(nj, fairJob("xq", "a", at(-time.Hour), 0), fairJob("xq", "b", at(-time.Hour), 0))
	}
	nj = append(nj, plainJob("xq", "plain2", at(-time.Minute), 0), plainJob("xq", "plain1", at(-2*time.Hour), 0),
		plainJob("xq", "later", at(time.Hour), 0), plainJob("xq", "low", at(-3*time.Hour), -1))
	x.enqueue(now, nj...)
	got := x.fairKeys("xq", now, 8, map[string]int{"a": 1, "b": 1})
	if want := []string{"a", "b", "plain1", "a", "b", "plain2", "a", "b"}; !slices.Equal(got, want) {
		x.t.Fatalf("keys leased one at a time = %v, want %v: the jobs without a key take a turn after the keys, oldest due first", got, want)
	}
	rest := x.fetch(store.FetchParams{Queue: "xq", Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	count := map[string]int{}
	for _, j := range rest {
		count[tenantOf(j)]++
	}
	if len(rest) != 15 || count["a"] != 7 || count["b"] != 7 || count["low"] != 1 {
		x.t.Errorf("the rest leased %v, want a 7, b 7, low 1 (and not the job due later)", count)
	}
	if len(rest) > 0 && tenantOf(rest[len(rest)-1]) != "low" {
		x.t.Errorf("the lower priority's job was not leased last: %v", jobIDs(rest))
	}
	// A batch gives the jobs without a key their share of every round,
	// one a round, with a key of weight 2.
	nj = nj[:0]
	for range 10 {
		nj = append(nj, fairJob("xq2", "a", at(-time.Hour), 0), plainJob("xq2", "plain", at(-time.Hour), 0))
	}
	x.enqueue(now, nj...)
	batch := x.fetch(store.FetchParams{Queue: "xq2", Limit: 6, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w",
		FairWeights: map[string]int{"a": 2}})
	clear(count)
	for _, j := range batch {
		count[tenantOf(j)]++
	}
	if len(batch) != 6 || count["a"] != 4 || count["plain"] != 2 {
		x.t.Errorf("a batch of 6 of key a (weight 2) and jobs without a key leased %v, want a 4, plain 2", count)
	}
}
