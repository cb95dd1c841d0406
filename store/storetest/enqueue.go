package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testEnqueueFields: every field of a new job, as returned by Enqueue and
// by Get.
func testEnqueueFields(x *h) {
	now := at(0)
	got := x.enqueue(now,
		store.NewJob{
			Queue: "emails", Kind: "send", Payload: raw(`{"to": "a@example.com", "n": [1, 2.5], "big": 12345678901234567}`),
			MaxRetries: 7, Policy: raw(`{"initial_ms": 1000, "jitter": "none"}`), IdempotencyKey: "order-1",
			Dependency: "smtp", NotReprocessable: true,
		},
		store.NewJob{Queue: "emails", Kind: "digest", MaxRetries: -1},
	)
	if got[0].ID <= 0 || got[1].ID <= got[0].ID {
		x.t.Errorf("Enqueue ids %d, %d: want positive and increasing", got[0].ID, got[1].ID)
	}
	want0 := &store.Job{
		ID: got[0].ID, Queue: "emails", Kind: "send", Payload: raw(`{"to":"a@example.com","n":[1,2.5],"big":12345678901234567}`),
		State: store.Pending, MaxRetries: 7, Policy: raw(`{"jitter":"none","initial_ms":1000}`),
		IdempotencyKey: "order-1", Dependency: "smtp", Reprocessable: false, CreatedAt: now, RunAt: now,
	}
	want1 := &store.Job{
		ID: got[1].ID, Queue: "emails", Kind: "digest", Payload: raw(`null`), State: store.Pending, MaxRetries: -1,
		Reprocessable: true, CreatedAt: now, RunAt: now,
	}
	x.checkJob("Enqueue result", got[0], want0)
	x.checkJob("Enqueue result (nil payload)", got[1], want1)
	x.checkJob("Get", x.get(got[0].ID), want0)
	x.checkJob("Get (nil payload)", x.get(got[1].ID), want1)
	if c := x.counter("emails", store.StatEnqueued); c != 2 {
		x.t.Errorf("counter emails/enqueued = %d, want 2", c)
	}
}

// testEnqueueRunAt: RunAt decides pending or scheduled; a zero RunAt means
// now; a past RunAt is kept as given.
func testEnqueueRunAt(x *h) {
	now := at(time.Hour)
	cases := []struct {
		runAt     time.Time
		wantRunAt time.Time
		state     store.State
	}{
		{time.Time{}, now, store.Pending},
		{now.Add(-time.Hour), now.Add(-time.Hour), store.Pending},
		{now, now, store.Pending},
		{now.Add(time.Microsecond), now.Add(time.Microsecond), store.Scheduled},
		{now.Add(24 * time.Hour), now.Add(24 * time.Hour), store.Scheduled},
	}
	var jobs []store.NewJob
	for _, c := range cases {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", RunAt: c.runAt})
	}
	got := x.enqueue(now, jobs...)
	for i, c := range cases {
		for _, j := range []*store.Job{got[i], x.get(got[i].ID)} {
			if j.State != c.state || !sameTime(j.RunAt, c.wantRunAt) || !sameTime(j.CreatedAt, now) {
				x.t.Errorf("job with RunAt %s enqueued at %s: state %s, RunAt %s, CreatedAt %s; want %s, %s, %s",
					fmtTime(c.runAt), fmtTime(now), j.State, fmtTime(j.RunAt), fmtTime(j.CreatedAt), c.state, fmtTime(c.wantRunAt), fmtTime(now))
			}
		}
	}
	st := normJobs(x.stats().Jobs)
	if st["q"][store.Pending] != 3 || st["q"][store.Scheduled] != 2 || len(st["q"]) != 2 {
		x.t.Errorf("Stats.Jobs[q] = %v, want pending 3, scheduled 2", st["q"])
	}
}

// testEnqueueInvalid: an invalid job fails the whole call with ErrInvalid
// and inserts nothing, not even the valid jobs of that call.
func testEnqueueInvalid(x *h) {
	valid := store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"ok":true}`), IdempotencyKey: "valid-key"}
	cases := []struct {
		name string
		job  store.NewJob
	}{
		{"empty queue", store.NewJob{Queue: "", Kind: "k"}},
		{"empty kind", store.NewJob{Queue: "q", Kind: ""}},
		{"truncated JSON payload", store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"a":`)}},
		{"non-JSON payload", store.NewJob{Queue: "q", Kind: "k", Payload: raw(`hello`)}},
		{"payload with trailing garbage", store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"a":1} x`)}},
		{"priority above the range", store.NewJob{Queue: "q", Kind: "k", Priority: store.MaxPriority + 1}},
		{"priority below the range", store.NewJob{Queue: "q", Kind: "k", Priority: store.MinPriority - 1}},
		{"priority far out of range", store.NewJob{Queue: "q", Kind: "k", Priority: 1 << 20}},
	}
	for _, c := range cases {
		for _, order := range []string{"after", "before"} {
			batch := []store.NewJob{valid, c.job}
			if order == "before" {
				batch = []store.NewJob{c.job, valid}
			}
			jobs, err := x.s.Enqueue(x.ctx, batch, at(0))
			if !errors.Is(err, store.ErrInvalid) {
				x.t.Errorf("Enqueue with %s (%s a valid job) = %d jobs, %v; want an error wrapping store.ErrInvalid", c.name, order, len(jobs), err)
			}
		}
	}
	if all := x.listAll(store.Filter{}, store.MaxPageSize); len(all) != 0 {
		x.t.Errorf("after failed Enqueue calls the store holds %d jobs (ids %v), want none", len(all), jobIDs(all))
	}
	if c := x.counter("q", store.StatEnqueued); c != 0 {
		x.t.Errorf("counter q/enqueued = %d after failed Enqueue calls, want 0", c)
	}
	// The key of the valid job was not taken by the failed calls.
	got := x.enqueue(at(time.Second), valid)
	if got[0].Existing {
		x.t.Errorf("Enqueue of %q after failed calls returned an existing job %d; the failed calls must not have inserted it", valid.IdempotencyKey, got[0].ID)
	}
}

// testEnqueueIDsIncrease: ids grow in insertion order, within a call and
// across calls.
func testEnqueueIDsIncrease(x *h) {
	var jobs []store.NewJob
	for i := range 20 {
		jobs = append(jobs, store.NewJob{Queue: fmt.Sprintf("q%d", i%3), Kind: "k", Payload: raw(fmt.Sprintf(`{"i":%d}`, i))})
	}
	first := x.enqueue(at(0), jobs...)
	second := x.enqueue(at(time.Second), jobs[:5]...)
	all := append(first, second...)
	for i, j := range all {
		if j.ID <= 0 {
			x.t.Errorf("job %d has id %d, want > 0", i, j.ID)
		}
		if i > 0 && j.ID <= all[i-1].ID {
			x.t.Errorf("job %d has id %d after id %d: want increasing ids in insertion order", i, j.ID, all[i-1].ID)
		}
	}
	for i, j := range first {
		if !jsonEqual(x.get(j.ID).Payload, jobs[i].Payload) {
			x.t.Errorf("job %d (id %d) has payload %s, want %s: ids do not follow the order of the jobs", i, j.ID, x.get(j.ID).Payload, jobs[i].Payload)
		}
	}
}

// testIdempotency: a taken key returns the job holding it, in any state,
// with its original payload; jobs without a key are never deduplicated.
func testIdempotency(x *h) {
	first := x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"v":1}`), IdempotencyKey: "key-a", MaxRetries: 2})[0]
	if first.Existing {
		x.t.Errorf("first Enqueue of key-a: Existing = true, want false")
	}
	again := x.enqueue(at(time.Second), store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"v":2}`), IdempotencyKey: "key-a", MaxRetries: 9})[0]
	want := clone(x.get(first.ID))
	want.Existing = true
	x.checkJob("second Enqueue of key-a", again, want, "History")
	if g := x.get(first.ID); g.Existing {
		x.t.Errorf("Get(%d).Existing = true: Existing must not be stored", first.ID)
	}

	// Jobs without a key are all inserted.
	nokey := x.enqueue(at(2*time.Second), store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	if nokey[0].Existing || nokey[1].Existing || nokey[0].ID == nokey[1].ID {
		x.t.Errorf("two jobs without key: ids %d, %d, existing %v, %v; want two new jobs", nokey[0].ID, nokey[1].ID, nokey[0].Existing, nokey[1].Existing)
	}

	// The key stays taken whatever the state of its job: running...
	leased := x.fetchWant(store.FetchParams{Queue: "q", Limit: 1, Now: at(3 * time.Second), LeaseUntil: at(time.Minute), Worker: "w"}, first.ID)[0]
	dup := x.enqueue(at(4*time.Second), store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "key-a"})[0]
	if !dup.Existing || dup.ID != first.ID || dup.State != store.Running || !jsonEqual(dup.Payload, raw(`{"v":1}`)) {
		x.t.Errorf("Enqueue of key-a held by a running job: id %d, Existing %v, state %s, payload %s; want id %d, true, running, {\"v\":1}",
			dup.ID, dup.Existing, dup.State, dup.Payload, first.ID)
	}
	// ...completed...
	x.finish(completeOf(leased, at(5*time.Second)))
	dup = x.enqueue(at(6*time.Second), store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "key-a"})[0]
	if !dup.Existing || dup.ID != first.ID || dup.State != store.Completed {
		x.t.Errorf("Enqueue of key-a held by a completed job: id %d, Existing %v, state %s; want id %d, true, completed", dup.ID, dup.Existing, dup.State, first.ID)
	}
	// ...dead, and canceled.
	deadID := x.makeDead(at(7*time.Second), deadSpec{job: store.NewJob{Queue: "d", Kind: "k", IdempotencyKey: "key-dead"}, deadAt: at(8 * time.Second), reason: "r", fp: "f", err: "e"})[0]
	canceled := x.enqueue(at(9*time.Second), store.NewJob{Queue: "c", Kind: "k", IdempotencyKey: "key-canceled", RunAt: at(time.Hour)})[0]
	x.cancel(canceled.ID, at(10*time.Second))
	for key, c := range map[string]struct {
		queue string
		id    int64
		state store.State
	}{"key-dead": {"d", deadID, store.Dead}, "key-canceled": {"c", canceled.ID, store.Canceled}} {
		dup := x.enqueue(at(11*time.Second), store.NewJob{Queue: c.queue, Kind: "k", IdempotencyKey: key})[0]
		if !dup.Existing || dup.ID != c.id || dup.State != c.state {
			x.t.Errorf("Enqueue of %s: id %d, Existing %v, state %s; want id %d, true, %s", key, dup.ID, dup.Existing, dup.State, c.id, c.state)
		}
		if ids := x.listIDs(store.Filter{Queue: c.queue}, 100); len(ids) != 1 {
			x.t.Errorf("queue %s holds jobs %v after a deduplicated enqueue, want only job %d", c.queue, ids, c.id)
		}
	}

	// Counters: one enqueued per insert, one deduplicated per answer by an
	// existing job, on the queue of the enqueue.
	st := normCounters(x.stats().Counters)
	if st["q"][store.StatEnqueued] != 3 || st["q"][store.StatDeduplicated] != 3 {
		x.t.Errorf("counters[q] = %v, want enqueued 3, deduplicated 3", st["q"])
	}
	for _, q := range []string{"d", "c"} {
		if st[q][store.StatEnqueued] != 1 || st[q][store.StatDeduplicated] != 1 {
			x.t.Errorf("counters[%s] = %v, want enqueued 1, deduplicated 1", q, st[q])
		}
	}
}

// testIdempotencyBatch: duplicate keys within one call: the first inserts,
// the later ones get it back.
func testIdempotencyBatch(x *h) {
	got := x.enqueue(at(0),
		store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"n":1}`), IdempotencyKey: "b"},
		store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"n":2}`), IdempotencyKey: "b"},
		store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"n":3}`)},
		store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"n":4}`), IdempotencyKey: "c"},
		store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"n":5}`), IdempotencyKey: "b"},
	)
	if got[0].Existing || got[2].Existing || got[3].Existing {
		x.t.Errorf("new jobs marked Existing: %v %v %v", got[0].Existing, got[2].Existing, got[3].Existing)
	}
	for _, i := range []int{1, 4} {
		if !got[i].Existing || got[i].ID != got[0].ID || !jsonEqual(got[i].Payload, raw(`{"n":1}`)) {
			x.t.Errorf("job %d of the batch (key b again): id %d, Existing %v, payload %s; want id %d, true, {\"n\":1}", i, got[i].ID, got[i].Existing, got[i].Payload, got[0].ID)
		}
	}
	if !(got[0].ID < got[2].ID && got[2].ID < got[3].ID) {
		x.t.Errorf("inserted ids %d, %d, %d: want increasing in insertion order", got[0].ID, got[2].ID, got[3].ID)
	}
	x.checkIDs("List after the batch", x.listIDs(store.Filter{}, 100), []int64{got[3].ID, got[2].ID, got[0].ID})
	st := normCounters(x.stats().Counters)
	if st["q"][store.StatEnqueued] != 3 || st["q"][store.StatDeduplicated] != 2 {
		x.t.Errorf("counters[q] = %v, want enqueued 3, deduplicated 2", st["q"])
	}
}

// testIdempotencyConcurrent: 100 concurrent enqueues of one key create one
// job, and every caller gets it back.
func testIdempotencyConcurrent(x *h) {
	const n = 100
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		ids   [n]int64
		exist [n]bool
		errs  [n]error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			jobs, err := x.s.Enqueue(x.ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: raw(fmt.Sprintf(`{"g":%d}`, i)), IdempotencyKey: "one"}}, at(0))
			if err == nil && len(jobs) != 1 {
				err = fmt.Errorf("returned %d jobs, want 1", len(jobs))
			}
			if err != nil {
				errs[i] = err
				return
			}
			ids[i], exist[i] = jobs[0].ID, jobs[0].Existing
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			x.t.Fatalf("goroutine %d: Enqueue: %v", i, err)
		}
	}
	existing := 0
	for i := range n {
		if ids[i] != ids[0] {
			x.t.Errorf("goroutine %d got job %d, goroutine 0 got %d: want one id for all", i, ids[i], ids[0])
		}
		if exist[i] {
			existing++
		}
	}
	if existing != n-1 {
		x.t.Errorf("%d callers got Existing = true, want %d", existing, n-1)
	}
	all := x.listAll(store.Filter{}, store.MaxPageSize)
	if len(all) != 1 {
		x.t.Errorf("%d jobs exist after concurrent enqueues of one key, want 1", len(all))
	}
	st := normCounters(x.stats().Counters)
	if st["q"][store.StatEnqueued] != 1 || st["q"][store.StatDeduplicated] != n-1 {
		x.t.Errorf("counters[q] = %v, want enqueued 1, deduplicated %d", st["q"], n-1)
	}
}

// testIdempotencyKeyKept: the key of a job deleted by retention or a
// purge stays taken: Enqueue answers it with the deleted job (Existing and
// Gone, its id, queue, kind, final state and times), counted as
// deduplicated, in a batch with other keys too; once DeleteKeys passed
// the job's enqueue time, the key is free again.
func testIdempotencyKeyKept(x *h) {
	deadID := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "kd"}, deadAt: at(time.Second), reason: "r", fp: "f", err: "e"})[0]
	done := x.leaseNew(at(2*time.Second), "w", store.NewJob{Queue: "q", Kind: "kc", IdempotencyKey: "kc"})[0]
	x.finish(completeOf(done, at(3*time.Second)))

	if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{deadID}}, 10); err != nil || n != 1 {
		x.t.Fatalf("Purge(job %d) = %d, %v; want 1, nil", deadID, n, err)
	}
	if n, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 10); err != nil || n != 1 {
		x.t.Fatalf("DeleteFinished(completed) = %d, %v; want 1, nil", n, err)
	}
	before := x.counter("q", store.StatDeduplicated)
	got := x.enqueue(at(4*time.Second), store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "kd"},
		store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "fresh"},
		store.NewJob{Queue: "q", Kind: "kc", IdempotencyKey: "kc"},
		store.NewJob{Queue: "q", Kind: "k"})
	for i, c := range []struct {
		id    int64
		kind  string
		state store.State
	}{{deadID, "k", store.Dead}, {0, "", ""}, {done.ID, "kc", store.Completed}} {
		g := got[[]int{0, 1, 2}[i]]
		if c.id == 0 {
			if g.Existing || g.Gone || g.State != store.Pending {
				x.t.Errorf("a fresh key: Existing %v Gone %v state %s; want a new pending job", g.Existing, g.Gone, g.State)
			}
			continue
		}
		if !g.Existing || !g.Gone || g.ID != c.id || g.Kind != c.kind || g.State != c.state || g.Queue != "q" || g.CreatedAt.IsZero() {
			x.t.Errorf("the key of deleted job %d: id %d Existing %v Gone %v kind %q state %s; want the deleted job", c.id, g.ID,
				g.Existing, g.Gone, g.Kind, g.State)
		}
	}
	if got[3].Existing || got[3].State != store.Pending {
		x.t.Errorf("a job without a key in the batch: %+v", got[3])
	}
	if n := x.counter("q", store.StatDeduplicated) - before; n != 2 {
		x.t.Errorf("deduplicated counter grew by %d, want 2", n)
	}
	if _, err := x.s.Get(x.ctx, deadID); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("Get(deleted job %d) = %v, want ErrNotFound", deadID, err)
	}
	// Key retention: the keys of jobs enqueued before the cutoff go.
	if n, err := x.s.DeleteKeys(x.ctx, at(time.Second)); err != nil || n != 1 {
		x.t.Fatalf("DeleteKeys(1s) = %d, %v; want 1 (the key of the job enqueued at 0)", n, err)
	}
	again := x.enqueue(at(5*time.Second), store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "kd"}, store.NewJob{Queue: "q", Kind: "kc", IdempotencyKey: "kc"})
	if again[0].Existing || again[0].ID == deadID || again[0].State != store.Pending {
		x.t.Errorf("a key past retention: Existing %v id %d state %s; want a new pending job", again[0].Existing, again[0].ID, again[0].State)
	}
	if !again[1].Existing || !again[1].Gone || again[1].ID != done.ID {
		x.t.Errorf("a key within retention: %+v; want the deleted job %d", again[1], done.ID)
	}
}
