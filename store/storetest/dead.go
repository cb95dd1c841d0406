package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// addDead calls AddDead and fails unless it returns one job per input.
func (x *h) addDead(now time.Time, jobs ...store.DeadJob) []*store.Job {
	x.t.Helper()
	got, err := x.s.AddDead(x.ctx, jobs, now)
	if err != nil {
		x.t.Fatalf("AddDead(%d jobs): %v", len(jobs), err)
	}
	if len(got) != len(jobs) {
		x.t.Fatalf("AddDead(%d jobs) returned %d jobs", len(jobs), len(got))
	}
	for i, j := range got {
		if j == nil {
			x.t.Fatalf("AddDead returned a nil job at index %d", i)
		}
	}
	return got
}

// deadJob is a dead job of queue "dq" with key, dead at deadAt after one
// failed attempt.
func deadJob(key, payload string, deadAt time.Time) store.DeadJob {
	return store.DeadJob{Queue: "dq", Kind: "k", Payload: raw(payload), IdempotencyKey: key, MaxRetries: -1,
		CreatedAt: at(0), DeadAt: deadAt, Attempt: 1, DeadReason: "rejected", LastError: "rejected by the consumer",
		LastErrorClass: failure.Permanent, Fingerprint: "fp",
		History: []store.Event{{Kind: store.EventDead, Attempt: 1, At: deadAt, Class: "permanent", Error: "rejected by the consumer", Reason: "rejected"}}}
}

// testAddDeadFields: every field of a job added dead, as AddDead returns
// it and as Get, List, Count, Groups, Stats and Queues see it.
func testAddDeadFields(x *h) {
	west := time.FixedZone("UTC-3", -3*3600)
	history := []store.Event{
		{Kind: store.EventRetry, Attempt: 1, At: at(-time.Hour), Duration: store.Duration(1500 * time.Millisecond), Class: "transient",
			Error: "timeout", Reason: "deadline", Delay: store.Duration(time.Minute), Worker: "consumer-1"},
		{Kind: store.EventRedriven, At: at(-30 * time.Minute), Note: "replayed (alice)"},
		{Kind: store.EventDead, Attempt: 2, At: at(time.Minute), Duration: store.Duration(250 * time.Millisecond), Class: "permanent",
			Error: "consumer rejected: bad order", Reason: "rejected", Worker: "consumer-2"},
	}
	full := store.DeadJob{
		Queue: "broker", Kind: "order.created", Payload: raw(`{"id": 42, "items": [1, 2.5], "big": 12345678901234567}`),
		IdempotencyKey: "amqp:orders:msg-1", Dependency: "rabbit", MaxRetries: 5,
		CreatedAt: at(-2 * time.Hour).In(west), DeadAt: at(time.Minute).In(west),
		Attempt: 2, Redriven: 1, DeadReason: "rejected", LastError: "consumer rejected: bad order",
		LastErrorClass: failure.Permanent, Fingerprint: "permanent:bad order", History: history, Trace: traceOf(1),
	}
	// No key, no payload, no history, no class, no creation time, never
	// attempted, not reprocessable.
	bare := store.DeadJob{Queue: "broker", Kind: "order.paid", DeadAt: at(2 * time.Minute), MaxRetries: -1, NotReprocessable: true,
		DeadReason: "expired", LastError: "message expired", Fingerprint: "expired"}
	other := store.DeadJob{Queue: "broker2", Kind: "k", Payload: raw(`[1,2]`), DeadAt: at(3 * time.Minute), Attempt: 4,
		DeadReason: "retries_exhausted", LastError: "503", LastErrorClass: failure.Transient, Fingerprint: "transient:503"}
	got := x.addDead(at(time.Hour), full, bare, other)
	for i, j := range got {
		if j.Existing || j.Gone {
			x.t.Errorf("AddDead job %d: Existing %v, Gone %v; want a new job", i, j.Existing, j.Gone)
		}
		if j.ID <= 0 || (i > 0 && j.ID == got[i-1].ID) {
			x.t.Errorf("AddDead job %d: id %d; want a new positive id", i, j.ID)
		}
	}
	wantFull := &store.Job{
		ID: got[0].ID, Queue: "broker", Kind: "order.created", Payload: raw(`{"id":42,"items":[1,2.5],"big":12345678901234567}`),
		State: store.Dead, Attempt: 2, MaxRetries: 5, IdempotencyKey: "amqp:orders:msg-1", Dependency: "rabbit", Reprocessable: true,
		CreatedAt: at(-2 * time.Hour), RunAt: at(time.Minute), FinishedAt: tp(at(time.Minute)), RetryCount: 1,
		LastError: "consumer rejected: bad order", LastErrorClass: failure.Permanent, LastFailedAt: tp(at(time.Minute)),
		DeadAt: tp(at(time.Minute)), DeadReason: "rejected", Fingerprint: "permanent:bad order", Redriven: 1, History: history,
		Trace: traceOf(1),
	}
	wantBare := &store.Job{
		ID: got[1].ID, Queue: "broker", Kind: "order.paid", Payload: raw(`null`), State: store.Dead, MaxRetries: -1,
		Reprocessable: false, CreatedAt: at(2 * time.Minute), RunAt: at(2 * time.Minute), FinishedAt: tp(at(2 * time.Minute)),
		LastError: "message expired", LastErrorClass: failure.Unknown, LastFailedAt: tp(at(2 * time.Minute)),
		DeadAt: tp(at(2 * time.Minute)), DeadReason: "expired", Fingerprint: "expired", History: []store.Event{},
	}
	wantOther := &store.Job{
		ID: got[2].ID, Queue: "broker2", Kind: "k", Payload: raw(`[1,2]`), State: store.Dead, Attempt: 4, Reprocessable: true,
		CreatedAt: at(3 * time.Minute), RunAt: at(3 * time.Minute), FinishedAt: tp(at(3 * time.Minute)), RetryCount: 3,
		LastError: "503", LastErrorClass: failure.Transient, LastFailedAt: tp(at(3 * time.Minute)),
		DeadAt: tp(at(3 * time.Minute)), DeadReason: "retries_exhausted", Fingerprint: "transient:503", History: []store.Event{},
	}
	for i, want := range []*store.Job{wantFull, wantBare, wantOther} {
		x.checkJob(fmt.Sprintf("AddDead result %d", i), got[i], want)
		x.checkJob(fmt.Sprintf("Get of job %d added dead", i), x.get(want.ID), want)
	}

	// The DLQ sees them as any dead job.
	dead := store.Filter{States: []store.State{store.Dead}}
	x.checkIDs("List of dead jobs", x.listIDs(dead, 2), []int64{got[2].ID, got[1].ID, got[0].ID})
	x.checkIDs("List of queue broker, class permanent", x.listIDs(store.Filter{Queue: "broker", Class: "permanent"}, 10), []int64{got[0].ID})
	x.checkIDs("List of reason expired", x.listIDs(store.Filter{States: []store.State{store.Dead}, Reason: "expired"}, 10), []int64{got[1].ID})
	if n, err := x.s.Count(x.ctx, dead); err != nil || n != 3 {
		x.t.Errorf("Count(dead) = %d, %v; want 3, nil", n, err)
	}
	recs := []deadRec{
		{id: got[0].ID, queue: "broker", kind: "order.created", class: failure.Permanent, reason: "rejected", fp: "permanent:bad order",
			err: "consumer rejected: bad order", deadAt: at(time.Minute)},
		{id: got[1].ID, queue: "broker", kind: "order.paid", class: failure.Unknown, reason: "expired", fp: "expired",
			err: "message expired", deadAt: at(2 * time.Minute)},
		{id: got[2].ID, queue: "broker2", kind: "k", class: failure.Transient, reason: "retries_exhausted", fp: "transient:503",
			err: "503", deadAt: at(3 * time.Minute)},
	}
	x.checkGroups("Groups of jobs added dead", x.groups(store.Filter{}, 10), wantGroups(recs, nil, 10))
	x.checkGroups("Groups by fingerprint", x.groups(store.Filter{Fingerprint: "permanent:bad order"}, 10),
		wantGroups(recs, func(r deadRec) bool { return r.fp == "permanent:bad order" }, 10))

	// Each counts as one death of its class ("none" counts as unknown),
	// in its queue, which Queues lists.
	st := x.stats()
	for _, c := range []struct {
		queue, name string
		n           int64
	}{{"broker", "dead.permanent", 1}, {"broker", "dead.unknown", 1}, {"broker2", "dead.transient", 1}, {"broker2", "dead.permanent", 0}} {
		if n := st.Counters[c.queue][c.name]; n != c.n {
			x.t.Errorf("counter %s/%s = %d, want %d", c.queue, c.name, n, c.n)
		}
	}
	if jobs := normJobs(st.Jobs); jobs["broker"][store.Dead] != 2 || jobs["broker2"][store.Dead] != 1 || len(jobs["broker"]) != 1 || len(jobs["broker2"]) != 1 {
		x.t.Errorf("Stats.Jobs = %v, want broker: dead 2, broker2: dead 1", jobs)
	}
	x.checkQueues("Queues", x.queues(), []store.QueueState{{Name: "broker"}, {Name: "broker2"}})

	// Dead jobs are never leased.
	if j := x.fetch(store.FetchParams{Queue: "broker", Limit: 10, Now: at(24 * time.Hour), LeaseUntil: at(25 * time.Hour), Worker: "w"}); len(j) != 0 {
		x.t.Errorf("Fetch leased jobs %v added dead", jobIDs(j))
	}
	if _, ok, err := x.s.NextDue(x.ctx, "broker"); err != nil || ok {
		x.t.Errorf("NextDue(broker) with only dead jobs: ok %v, err %v; want false, nil", ok, err)
	}
	// An empty call adds nothing.
	if j, err := x.s.AddDead(x.ctx, nil, at(time.Hour)); err != nil || len(j) != 0 {
		x.t.Errorf("AddDead(no jobs) = %d jobs, %v; want none, nil", len(j), err)
	}
}

// testAddDeadInvalid: AddDead refuses what Enqueue refuses (empty queue or
// kind, a payload that is not JSON), and a zero DeadAt, a negative
// attempt or redrive count, an unknown class: the whole call fails with
// ErrInvalid and adds nothing, not even the valid jobs of that call.
func testAddDeadInvalid(x *h) {
	valid := deadJob("valid-key", `{"ok":true}`, at(time.Second))
	with := func(f func(d *store.DeadJob)) store.DeadJob {
		d := deadJob("", `{"v":1}`, at(time.Second))
		f(&d)
		return d
	}
	cases := []struct {
		name string
		job  store.DeadJob
	}{
		{"empty queue", with(func(d *store.DeadJob) { d.Queue = "" })},
		{"empty kind", with(func(d *store.DeadJob) { d.Kind = "" })},
		{"binary payload", with(func(d *store.DeadJob) { d.Payload = []byte{0x00, 0xff} })},
		{"non-JSON payload", with(func(d *store.DeadJob) { d.Payload = raw(`hello`) })},
		{"truncated JSON payload", with(func(d *store.DeadJob) { d.Payload = raw(`{"a":`) })},
		{"zero DeadAt", with(func(d *store.DeadJob) { d.DeadAt = time.Time{} })},
		{"negative attempt", with(func(d *store.DeadJob) { d.Attempt = -1 })},
		{"negative redriven", with(func(d *store.DeadJob) { d.Redriven = -1 })},
		{"unknown class", with(func(d *store.DeadJob) { d.LastErrorClass = failure.Class(200) })},
		{"trace context with a newline", with(func(d *store.DeadJob) { d.Trace = traceOf(2) + "\n" })},
		{"trace context too long", with(func(d *store.DeadJob) { d.Trace = traceOf(3) + " " + strings.Repeat("s", store.MaxTrace) })},
	}
	for _, c := range cases {
		for _, order := range []string{"after", "before"} {
			batch := []store.DeadJob{valid, c.job}
			if order == "before" {
				batch = []store.DeadJob{c.job, valid}
			}
			jobs, err := x.s.AddDead(x.ctx, batch, at(time.Hour))
			if !errors.Is(err, store.ErrInvalid) {
				x.t.Errorf("AddDead with %s (%s a valid job) = %d jobs, %v; want an error wrapping store.ErrInvalid", c.name, order, len(jobs), err)
			}
		}
	}
	if all := x.listAll(store.Filter{}, store.MaxPageSize); len(all) != 0 {
		x.t.Errorf("after failed AddDead calls the store holds %d jobs (ids %v), want none", len(all), jobIDs(all))
	}
	if c := x.counter("dq", "dead.permanent"); c != 0 {
		x.t.Errorf("counter dq/dead.permanent = %d after failed AddDead calls, want 0", c)
	}
	// The key of the valid job was not taken by the failed calls.
	if got := x.addDead(at(time.Hour), valid)[0]; got.Existing {
		x.t.Errorf("AddDead of %q after failed calls returned an existing job %d; the failed calls must not have inserted it", valid.IdempotencyKey, got.ID)
	}
}

// testAddDeadIdempotency: a key already taken, by a job added dead or
// enqueued, across calls or within one, is answered with the job holding
// it, as Enqueue answers; a kept key of a deleted job too (Gone), until
// DeleteKeys passes its creation time.
func testAddDeadIdempotency(x *h) {
	first := x.addDead(at(time.Hour), deadJob("k1", `{"v":1}`, at(time.Minute)))[0]
	if first.Existing {
		x.t.Fatalf("first AddDead of k1: Existing = true, want false")
	}
	want := clone(x.get(first.ID))
	want.Existing = true
	again := x.addDead(at(2*time.Hour), deadJob("k1", `{"v":2}`, at(2*time.Minute)))[0]
	x.checkJob("second AddDead of k1", again, want)
	if g := x.get(first.ID); g.Existing {
		x.t.Errorf("Get(%d).Existing = true: Existing must not be stored", first.ID)
	}

	// Within one call: the first job with the key is added, the later ones
	// get it back.
	batch := x.addDead(at(time.Hour), deadJob("k2", `{"n":1}`, at(time.Minute)), deadJob("", `{"n":2}`, at(time.Minute)),
		deadJob("k2", `{"n":3}`, at(time.Minute)))
	if batch[0].Existing || batch[1].Existing || batch[0].ID == batch[1].ID {
		x.t.Errorf("new jobs of a batch: ids %d, %d, Existing %v, %v; want two new jobs", batch[0].ID, batch[1].ID, batch[0].Existing, batch[1].Existing)
	}
	if b := batch[2]; !b.Existing || b.ID != batch[0].ID || !jsonEqual(b.Payload, raw(`{"n":1}`)) || b.State != store.Dead {
		x.t.Errorf("job 2 of the batch (key k2 again): id %d, Existing %v, payload %s, state %s; want id %d, true, {\"n\":1}, dead",
			b.ID, b.Existing, b.Payload, b.State, batch[0].ID)
	}

	// A key taken by an enqueued job, and Enqueue of a key taken by a job
	// added dead.
	pending := x.enqueue(at(time.Hour), store.NewJob{Queue: "pq", Kind: "k", Payload: raw(`{"p":1}`), IdempotencyKey: "k3"})[0]
	if d := x.addDead(at(time.Hour), deadJob("k3", `{"v":3}`, at(time.Minute)))[0]; !d.Existing || d.ID != pending.ID || d.State != store.Pending || d.Queue != "pq" {
		x.t.Errorf("AddDead of k3 held by a pending job: id %d, Existing %v, state %s, queue %s; want id %d, true, pending, pq",
			d.ID, d.Existing, d.State, d.Queue, pending.ID)
	}
	if e := x.enqueue(at(time.Hour), store.NewJob{Queue: "dq", Kind: "k", IdempotencyKey: "k1"})[0]; !e.Existing || e.ID != first.ID || e.State != store.Dead {
		x.t.Errorf("Enqueue of k1 held by a job added dead: id %d, Existing %v, state %s; want id %d, true, dead", e.ID, e.Existing, e.State, first.ID)
	}
	if n := x.counter("dq", "dead.permanent"); n != 3 {
		x.t.Errorf("counter dq/dead.permanent = %d, want 3 (one per job added, none per job answered)", n)
	}
	if n, err := x.s.Count(x.ctx, store.Filter{}); err != nil || n != 4 {
		x.t.Errorf("Count = %d, %v; want 4 (three added dead, one enqueued)", n, err)
	}

	// The key of a purged job stays taken until DeleteKeys passes its
	// creation time.
	if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{first.ID}}, 10); err != nil || n != 1 {
		x.t.Fatalf("Purge(job %d) = %d, %v; want 1, nil", first.ID, n, err)
	}
	gone := x.addDead(at(3*time.Hour), deadJob("k1", `{"v":4}`, at(3*time.Minute)), deadJob("k1", `{"v":5}`, at(3*time.Minute)))
	for i, g := range gone {
		if !g.Existing || !g.Gone || g.ID != first.ID || g.Queue != "dq" || g.Kind != "k" || g.State != store.Dead || !sameTime(g.CreatedAt, at(0)) {
			x.t.Errorf("AddDead %d of the key of purged job %d: id %d, Existing %v, Gone %v, queue %q, kind %q, state %s, created %s; want the purged job",
				i, first.ID, g.ID, g.Existing, g.Gone, g.Queue, g.Kind, g.State, fmtTime(g.CreatedAt))
		}
	}
	if e := x.enqueue(at(3*time.Hour), store.NewJob{Queue: "dq", Kind: "k", IdempotencyKey: "k1"})[0]; !e.Existing || !e.Gone || e.ID != first.ID {
		x.t.Errorf("Enqueue of the key of purged job %d: id %d, Existing %v, Gone %v; want the purged job", first.ID, e.ID, e.Existing, e.Gone)
	}
	x.notFound(first.ID)
	if n := x.counter("dq", "dead.permanent"); n != 3 {
		x.t.Errorf("counter dq/dead.permanent = %d after AddDead of a kept key, want 3", n)
	}
	if n, err := x.s.DeleteKeys(x.ctx, at(time.Second)); err != nil || n != 1 {
		x.t.Fatalf("DeleteKeys(1s) = %d, %v; want 1", n, err)
	}
	fresh := x.addDead(at(4*time.Hour), deadJob("k1", `{"v":6}`, at(4*time.Minute)))[0]
	if fresh.Existing || fresh.ID == first.ID || fresh.State != store.Dead || !jsonEqual(fresh.Payload, raw(`{"v":6}`)) {
		x.t.Errorf("AddDead of a key past retention: id %d, Existing %v, state %s, payload %s; want a new dead job", fresh.ID, fresh.Existing, fresh.State, fresh.Payload)
	}
}

// testAddDeadConcurrent: concurrent AddDead calls of one key create one
// job, and every caller gets it back.
func testAddDeadConcurrent(x *h) {
	const n = 50
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
			jobs, err := x.s.AddDead(x.ctx, []store.DeadJob{deadJob("one", fmt.Sprintf(`{"g":%d}`, i), at(time.Minute))}, at(time.Hour))
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
			x.t.Fatalf("goroutine %d: AddDead: %v", i, err)
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
	if c, err := x.s.Count(x.ctx, store.Filter{}); err != nil || c != 1 {
		x.t.Errorf("Count = %d, %v after concurrent AddDead of one key; want 1", c, err)
	}
	if c := x.counter("dq", "dead.permanent"); c != 1 {
		x.t.Errorf("counter dq/dead.permanent = %d, want 1", c)
	}
}

// testAddDeadRedrive: a job added dead is redriven as any dead job:
// pending, attempt and retry count reset, redriven counted, history kept
// with the redriven event; one marked not reprocessable is refused.
func testAddDeadRedrive(x *h) {
	d := deadJob("r1", `{"v":1}`, at(time.Minute))
	d.Attempt, d.Redriven = 3, 1
	d.History = append([]store.Event{{Kind: store.EventRetry, Attempt: 1, At: at(0), Class: "transient", Error: "503", Delay: store.Duration(time.Second)}}, d.History...)
	refused := deadJob("", `{"v":2}`, at(time.Minute))
	refused.NotReprocessable = true
	got := x.addDead(at(time.Hour), d, refused)
	before, beforeRefused := x.get(got[0].ID), x.get(got[1].ID)

	res := x.redrive(store.RedriveParams{IDs: []int64{got[0].ID, got[1].ID}, Now: at(2 * time.Hour), Note: "replay (bob)"})
	x.checkIDSet("Redriven", res.Redriven, []int64{got[0].ID})
	x.checkIDSet("Refused", res.Refused, []int64{got[1].ID})
	x.checkIDSet("Skipped", res.Skipped, nil)

	after := x.get(got[0].ID)
	want := clone(before)
	want.State = store.Pending
	want.RunAt = at(2 * time.Hour)
	want.Attempt = 0
	want.RetryCount = 0
	want.Redriven = 2
	want.DeadAt = nil
	want.DeadReason = ""
	want.FinishedAt = nil
	// As in testRedrive, what a redrive does to the last failure's fields
	// and to AttemptedAt is left to the store.
	x.checkJob("redriven job added dead", after, want, "History", "LastError", "LastErrorClass", "LastFailedAt", "Fingerprint", "AttemptedAt")
	if len(after.History) != len(before.History)+1 || fmtHistory(after.History[:len(before.History)]) != fmtHistory(before.History) {
		x.t.Errorf("redriven job %d: history %s, want %s and a redriven event", after.ID, fmtHistory(after.History), fmtHistory(before.History))
	} else if ev := after.History[len(after.History)-1]; ev.Kind != store.EventRedriven || ev.Note != "replay (bob)" || !sameTime(ev.At, at(2*time.Hour)) || ev.Attempt != 0 {
		x.t.Errorf("redriven job %d: last event %s, want kind redriven, attempt 0, at %s, note %q", after.ID, fmtEvent(ev), fmtTime(at(2*time.Hour)), "replay (bob)")
	}
	x.checkJob("refused job added dead", x.get(got[1].ID), beforeRefused)

	// It runs again from attempt 1.
	j := x.fetchWant(store.FetchParams{Queue: "dq", Limit: 10, Now: at(3 * time.Hour), LeaseUntil: at(4 * time.Hour), Worker: "w"}, got[0].ID)[0]
	if j.Attempt != 1 || j.Redriven != 2 || !jsonEqual(j.Payload, raw(`{"v":1}`)) {
		x.t.Errorf("redriven job %d fetched with attempt %d, redriven %d, payload %s; want 1, 2, {\"v\":1}", j.ID, j.Attempt, j.Redriven, j.Payload)
	}
	st := x.stats()
	if n := st.Counters["dq"][store.StatRedriven]; n != 1 {
		x.t.Errorf("counter dq/redriven = %d, want 1", n)
	}
	if jobs := normJobs(st.Jobs)["dq"]; jobs[store.Running] != 1 || jobs[store.Dead] != 1 || len(jobs) != 2 {
		x.t.Errorf("Stats.Jobs[dq] = %v, want running 1, dead 1", jobs)
	}
}

// testAddDeadKeysModel: AddDead's answers to idempotency keys, in random
// calls mixing jobs without keys, keys new, repeated within the call,
// held by a dead or pending job, or kept for a deleted job, match a
// model of who holds each key; new jobs get ids increasing in input
// order, and each one, and only it, counts as a death.
func testAddDeadKeysModel(x *h) {
	type holder struct {
		id   int64
		gone bool
	}
	r := rand.New(rand.NewPCG(29, 0xadd))
	keys := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}
	held := map[string]holder{}
	live := map[int64]string{} // dead jobs in the store, and their keys
	var deaths int64
	var steps []string
	fail := func(format string, args ...any) {
		x.t.Fatalf(format+"; steps:\n%s", append(args, strings.Join(steps, "\n"))...)
	}
	for step := range 80 {
		switch op := r.IntN(10); {
		case op < 6:
			n := 1 + r.IntN(8)
			ds := make([]store.DeadJob, n)
			for i := range ds {
				key := ""
				if r.IntN(4) > 0 {
					key = keys[r.IntN(len(keys))]
				}
				ds[i] = deadJob(key, fmt.Sprintf(`{"step":%d,"i":%d}`, step, i), at(time.Duration(step)*time.Second))
			}
			got := x.addDead(at(time.Hour), ds...)
			steps = append(steps, fmt.Sprintf("add %d", n))
			inCall := map[string]int64{}
			var prev int64
			for i, j := range got {
				key := ds[i].IdempotencyKey
				h, taken := held[key]
				first, again := inCall[key]
				switch {
				case key != "" && taken:
					if !j.Existing || j.ID != h.id || j.Gone != h.gone {
						fail("step %d job %d (key %s held by %d, gone %v): id %d, Existing %v, Gone %v", step, i, key, h.id, h.gone, j.ID, j.Existing, j.Gone)
					}
				case key != "" && again:
					if !j.Existing || j.Gone || j.ID != first || !jsonEqual(j.Payload, got[slices.IndexFunc(got, func(g *store.Job) bool { return g.ID == first })].Payload) {
						fail("step %d job %d (key %s again in the call): id %d, Existing %v, Gone %v; want job %d", step, i, key, j.ID, j.Existing, j.Gone, first)
					}
				default:
					if j.Existing || j.Gone || j.State != store.Dead || j.ID <= prev || !jsonEqual(j.Payload, ds[i].Payload) {
						fail("step %d job %d (key %q, new): id %d (previous new %d), Existing %v, Gone %v, state %s, payload %s",
							step, i, key, j.ID, prev, j.Existing, j.Gone, j.State, j.Payload)
					}
					prev = j.ID
					deaths++
					live[j.ID] = key
					if key != "" {
						inCall[key] = j.ID
					}
				}
			}
			for k, id := range inCall {
				held[k] = holder{id: id}
			}
		case op < 7: // a pending job takes a free key
			key := keys[r.IntN(len(keys))]
			j := x.enqueue(at(time.Hour), store.NewJob{Queue: "pq", Kind: "k", IdempotencyKey: key, MaxRetries: -1})[0]
			if h, taken := held[key]; taken != j.Existing || (taken && j.ID != h.id) {
				fail("step %d: Enqueue of key %s (held %v by %d): id %d, Existing %v", step, key, taken, h.id, j.ID, j.Existing)
			}
			if !j.Existing {
				held[key] = holder{id: j.ID}
			}
			steps = append(steps, "enqueue "+key)
		case op < 9: // purge a dead job: its key stays kept
			if len(live) == 0 {
				continue
			}
			ids := make([]int64, 0, len(live))
			for id := range live {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			id := ids[r.IntN(len(ids))]
			if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{id}}, 10); err != nil || n != 1 {
				fail("step %d: Purge(%d) = %d, %v; want 1", step, id, n, err)
			}
			if key := live[id]; key != "" {
				held[key] = holder{id: id, gone: true}
			}
			delete(live, id)
			steps = append(steps, fmt.Sprintf("purge %d", id))
		default: // retention of the kept keys frees them
			if _, err := x.s.DeleteKeys(x.ctx, at(1000*time.Hour)); err != nil {
				fail("step %d: DeleteKeys: %v", step, err)
			}
			for k, h := range held {
				if h.gone {
					delete(held, k)
				}
			}
			steps = append(steps, "delete keys")
		}
	}
	if n := x.counter("dq", "dead.permanent"); n != deaths {
		fail("counter dq/dead.permanent = %d, want %d (one per job added)", n, deaths)
	}
	if n, err := x.s.Count(x.ctx, store.Filter{States: []store.State{store.Dead}}); err != nil || n != int64(len(live)) {
		fail("Count(dead) = %d, %v; want %d", n, err, len(live))
	}
}
