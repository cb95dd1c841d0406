package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// dlqModel is the dead jobs a store holds, as the test made them.
type dlqModel struct {
	x     *h
	r     *rand.Rand
	now   time.Time
	dead  map[int64]deadRec
	ended map[int64]time.Time // finished_at of each dead job
	steps []string
}

var (
	dlqQueues  = []string{"dq0", "dq1", "dq2"}
	dlqKinds   = []string{"ka", "kb"}
	dlqReasons = []string{"http_500", "retries_exhausted", "lease_expired"}
	dlqFPs     = []string{"fp1", "fp2", "fp3", "fp4"}
)

func (m *dlqModel) pick(s []string) string { return s[m.r.IntN(len(s))] }

// cause draws the fields of a death.
func (m *dlqModel) cause() (kind string, class failure.Class, reason, fp, msg string) {
	return m.pick(dlqKinds), failure.Classes[m.r.IntN(len(failure.Classes))], m.pick(dlqReasons), m.pick(dlqFPs),
		m.pick(dlqErrors) + fmt.Sprint(m.r.IntN(1000))
}

// dlqErrors start the errors of the model's deaths; dlqPrefixes are the
// error prefixes its filters draw: some start every error of a cause,
// some part of them, some none.
var (
	dlqErrors   = []string{"timeout after ", "timeout ", "refused: ", "Refused: ", "error ", ""}
	dlqPrefixes = []string{"timeout", "timeout a", "timeout after 1", "refused", "R", "error 9", "t", "e", "x", "1"}
)

// prefixFilter is filter with, one time in two, an error prefix.
func (m *dlqModel) prefixFilter() (store.Filter, func(deadRec) bool) {
	f, keep := m.filter()
	if m.r.IntN(2) == 0 {
		return f, keep
	}
	p := m.pick(dlqPrefixes)
	f.ErrorPrefix = p
	return f, func(r deadRec) bool { return keep(r) && strings.HasPrefix(r.err, p) }
}

// filter draws a DLQ filter of at most two cause fields.
func (m *dlqModel) filter() (store.Filter, func(deadRec) bool) {
	f := store.Filter{States: []store.State{store.Dead}}
	// One test per field: a field drawn twice keeps its last value.
	keeps := make([]func(deadRec) bool, 5)
	for range m.r.IntN(3) {
		switch field := m.r.IntN(5); field {
		case 0:
			q := m.pick(dlqQueues)
			f.Queue = q
			keeps[field] = (func(r deadRec) bool { return r.queue == q })
		case 1:
			k := m.pick(dlqKinds)
			f.Kind = k
			keeps[field] = (func(r deadRec) bool { return r.kind == k })
		case 2:
			c := failure.Classes[m.r.IntN(len(failure.Classes))]
			f.Class = c.String()
			keeps[field] = (func(r deadRec) bool { return r.class == c })
		case 3:
			re := m.pick(dlqReasons)
			f.Reason = re
			keeps[field] = (func(r deadRec) bool { return r.reason == re })
		case 4:
			fp := m.pick(dlqFPs)
			f.Fingerprint = fp
			keeps[field] = (func(r deadRec) bool { return r.fp == fp })
		}
	}
	return f, func(r deadRec) bool {
		for _, k := range keeps {
			if k != nil && !k(r) {
				return false
			}
		}
		return true
	}
}

func (m *dlqModel) ids() []int64 {
	ids := make([]int64, 0, len(m.dead))
	for id := range m.dead {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// step does one random change of the DLQ and records it.
func (m *dlqModel) step() {
	x := m.x
	m.now = m.now.Add(time.Duration(1+m.r.IntN(60)) * time.Second)
	switch op := m.r.IntN(10); {
	case op < 3: // dead letters added from elsewhere
		var ds []store.DeadJob
		for range 1 + m.r.IntN(4) {
			kind, class, reason, fp, msg := m.cause()
			ds = append(ds, store.DeadJob{Queue: m.pick(dlqQueues), Kind: kind, Payload: []byte(`{}`), MaxRetries: -1,
				DeadAt: m.now.Add(-time.Duration(m.r.IntN(600)) * time.Second), Attempt: 1,
				DeadReason: reason, LastError: msg, LastErrorClass: class, Fingerprint: fp})
		}
		jobs, err := x.s.AddDead(x.ctx, ds, m.now)
		if err != nil {
			x.t.Fatalf("AddDead: %v", err)
		}
		for i, j := range jobs {
			d := ds[i]
			class := d.LastErrorClass
			if class == failure.None {
				class = failure.Unknown
			}
			m.dead[j.ID] = deadRec{id: j.ID, queue: d.Queue, kind: d.Kind, class: class, reason: d.DeadReason, fp: d.Fingerprint, err: d.LastError, deadAt: d.DeadAt}
			m.ended[j.ID] = d.DeadAt
		}
		m.steps = append(m.steps, fmt.Sprintf("add %d dead", len(jobs)))
	case op < 5: // redrive some, then bury them again with new causes
		ids := m.ids()
		m.r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ids = ids[:min(len(ids), 1+m.r.IntN(4))]
		res := x.redrive(store.RedriveParams{IDs: append(slices.Clone(ids), 1<<40), Now: m.now})
		if len(res.Redriven) != len(ids) {
			x.t.Fatalf("Redrive(%v) redrove %v", ids, res.Redriven)
		}
		for _, id := range ids {
			delete(m.dead, id)
			delete(m.ended, id)
		}
		m.steps = append(m.steps, fmt.Sprintf("redrive %v", ids))
		if m.r.IntN(2) == 0 {
			m.rebury()
		}
	case op < 6: // cancel one
		ids := m.ids()
		if len(ids) == 0 {
			return
		}
		id := ids[m.r.IntN(len(ids))]
		if _, err := x.s.Cancel(x.ctx, id, m.now); err != nil {
			x.t.Fatalf("Cancel(%d): %v", id, err)
		}
		delete(m.dead, id)
		delete(m.ended, id)
		m.steps = append(m.steps, fmt.Sprintf("cancel %d", id))
	case op < 8: // purge every job of a filter
		f, keep := m.filter()
		n, err := x.s.Purge(x.ctx, f, 1000)
		if err != nil {
			x.t.Fatalf("Purge(%+v): %v", f, err)
		}
		var want int64
		for id, r := range m.dead {
			if keep(r) {
				delete(m.dead, id)
				delete(m.ended, id)
				want++
			}
		}
		if n != want {
			x.t.Fatalf("Purge(%+v) = %d, want %d", f, n, want)
		}
		m.steps = append(m.steps, fmt.Sprintf("purge %+v: %d", f, n))
	default: // retention
		before := m.now.Add(-time.Duration(m.r.IntN(900)) * time.Second)
		n, err := x.s.DeleteFinished(x.ctx, store.Dead, before, 1000)
		if err != nil {
			x.t.Fatalf("DeleteFinished: %v", err)
		}
		var want int64
		for id, t := range m.ended {
			if t.Before(before) {
				delete(m.dead, id)
				delete(m.ended, id)
				want++
			}
		}
		if n != want {
			x.t.Fatalf("DeleteFinished(dead, %s) = %d, want %d", fmtTime(before), n, want)
		}
		m.steps = append(m.steps, fmt.Sprintf("retention before %s: %d", fmtTime(before), n))
	}
}

// rebury leases the jobs redriven (pending in their queues) and buries
// them with new causes, as workers do.
func (m *dlqModel) rebury() {
	x := m.x
	for _, q := range dlqQueues {
		jobs, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: q, Limit: 100, Now: m.now, LeaseUntil: m.now.Add(time.Minute), Worker: "w"})
		if err != nil {
			x.t.Fatalf("Fetch: %v", err)
		}
		var outs []store.Outcome
		for _, j := range jobs {
			_, class, reason, fp, msg := m.cause()
			if class == failure.None {
				class = failure.Unknown
			}
			o := buryOf(j, m.now, class, reason, fp, msg)
			o.Error = msg
			outs = append(outs, o)
			m.dead[j.ID] = deadRec{id: j.ID, queue: j.Queue, kind: j.Kind, class: class, reason: reason, fp: fp, err: msg, deadAt: m.now}
			m.ended[j.ID] = m.now
		}
		x.finish(outs...)
		m.steps = append(m.steps, fmt.Sprintf("rebury %d in %s", len(jobs), q))
	}
}

// check compares the store's counts and groups of random filters with
// the model's.
func (m *dlqModel) check() {
	x := m.x
	recs := make([]deadRec, 0, len(m.dead))
	for _, id := range m.ids() {
		recs = append(recs, m.dead[id])
	}
	for range 4 {
		f, keep := m.prefixFilter()
		var want int64
		var match []deadRec
		for _, r := range recs {
			if keep(r) {
				want++
				match = append(match, r)
			}
		}
		if f.ErrorPrefix != "" {
			x.checkIDs(fmt.Sprintf("List(%+v), pages of 7", f), x.listIDs(f, 7), deadOrder(match))
		}
		n, err := x.s.Count(x.ctx, f)
		if err != nil {
			x.t.Fatalf("Count(%+v): %v", f, err)
		}
		if n != want {
			scan := f
			scan.Since = at(-1000 * time.Hour)
			real, _ := x.s.Count(x.ctx, scan)
			x.t.Fatalf("Count(%+v) = %d (%d dead jobs match), want %d; steps:\n%s", f, n, real, want, strings.Join(m.steps, "\n"))
		}
		x.checkGroups(fmt.Sprintf("Groups(%+v)", f), x.groups(f, 100), wantGroups(recs, keep, 100))
		// With a limit, the largest groups (ties at the limit in any
		// order).
		lim := 1 + m.r.IntN(3)
		got, all := x.groups(f, lim), wantGroups(recs, keep, 100)
		if len(got) != min(lim, len(all)) {
			x.t.Fatalf("Groups(%+v, %d) = %d groups, want %d", f, lim, len(got), min(lim, len(all)))
		}
		for i := range got {
			if got[i].Count != all[i].Count {
				x.t.Fatalf("Groups(%+v, %d)[%d] counts %d, want %d", f, lim, i, got[i].Count, all[i].Count)
			}
		}
	}
	if x.t.Failed() {
		x.t.Fatalf("steps:\n%s", strings.Join(m.steps, "\n"))
	}
}

// testDeadCountsModel: the DLQ's counts and groups by cause fields and
// error prefixes (which stores may keep counted rather than count), and
// its listings by error prefix, match a model of the dead jobs after
// every step of a random sequence of deaths (added and
// buried), redrives, cancels, purges and retention.
func testDeadCountsModel(x *h) {
	for _, seed := range []uint64{1, 2} {
		m := &dlqModel{x: x, r: rand.New(rand.NewPCG(seed, 0xd1a)), now: at(time.Duration(seed) * 24 * time.Hour),
			dead: map[int64]deadRec{}, ended: map[int64]time.Time{}}
		for range 60 {
			m.step()
			m.check()
		}
		// Leave the DLQ empty for the next seed.
		if _, err := x.s.Purge(x.ctx, store.Filter{}, 100000); err != nil {
			x.t.Fatalf("Purge: %v", err)
		}
	}
}

// concurrentErrors start the errors of testDeadCountsConcurrent's jobs.
var concurrentErrors = []string{"boom", "boom!", "bang"}

// testDeadCountsConcurrent: writers adding, redriving and purging dead
// jobs (and retention running) at once leave the counts and groups by
// cause fields and error prefixes equal to a
// count of the dead jobs themselves (a filter with a time bound, which
// no store answers from counts).
func testDeadCountsConcurrent(x *h) {
	const writers, rounds = 4, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			now := at(time.Duration(w) * time.Hour)
			for i := range rounds {
				var ds []store.DeadJob
				for range 1 + r.IntN(5) {
					ds = append(ds, store.DeadJob{Queue: dlqQueues[r.IntN(len(dlqQueues))], Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
						DeadAt: now.Add(time.Duration(i) * time.Second), DeadReason: dlqReasons[r.IntN(len(dlqReasons))],
						LastError: fmt.Sprintf("%s %d", concurrentErrors[r.IntN(len(concurrentErrors))], i), LastErrorClass: failure.Transient,
						Fingerprint: dlqFPs[r.IntN(len(dlqFPs))]})
				}
				jobs, err := x.s.AddDead(x.ctx, ds, now)
				if err != nil {
					errs <- err
					return
				}
				if r.IntN(2) == 0 {
					if _, err := x.s.Redrive(x.ctx, store.RedriveParams{IDs: []int64{jobs[0].ID}, Now: now}); err != nil {
						errs <- err
						return
					}
				}
				if r.IntN(3) == 0 {
					if _, err := x.s.Purge(x.ctx, store.Filter{Fingerprint: dlqFPs[r.IntN(len(dlqFPs))], Queue: dlqQueues[w%len(dlqQueues)]}, 2); err != nil {
						errs <- err
						return
					}
				}
				if r.IntN(4) == 0 {
					// Retention deleting nothing still tidies what a
					// store keeps of the causes left with no job.
					if _, err := x.s.DeleteFinished(x.ctx, store.Dead, at(-1000*time.Hour), 10); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.t.Fatalf("writer: %v", err)
	}
	dead := []store.State{store.Dead}
	for _, f := range []store.Filter{{States: dead}, {States: dead, Queue: "dq1"}, {States: dead, Fingerprint: "fp2"}, {States: dead, Reason: "http_500", Queue: "dq0"},
		{States: dead, ErrorPrefix: "boom"}, {States: dead, ErrorPrefix: "boom!"}, {States: dead, ErrorPrefix: "b", Queue: "dq2"},
		{States: dead, ErrorPrefix: "bang 1"}, {States: dead, ErrorPrefix: "boom 1"}} {
		counted, err := x.s.Count(x.ctx, f)
		if err != nil {
			x.t.Fatal(err)
		}
		scan := f
		scan.Since = at(-24 * time.Hour)
		real, err := x.s.Count(x.ctx, scan)
		if err != nil {
			x.t.Fatal(err)
		}
		if counted != real {
			x.t.Errorf("Count(%+v) = %d, but %d dead jobs match", f, counted, real)
		}
		g, rg := x.groups(f, 100), x.groups(scan, 100)
		x.checkGroups(fmt.Sprintf("Groups(%+v) against the jobs", f), g, rg)
	}
}

// testDeadPagesFilters: a dead-only listing with one or two cause filters
// and an error text (each with its own index, or none) pages through ties
// of dead_at without skipping or repeating a job, in the order of an
// unfiltered listing, and its count is the number of jobs it lists.
func testDeadPagesFilters(x *h) {
	m := &dlqModel{x: x, r: rand.New(rand.NewPCG(3, 0xd1a)), now: at(0), dead: map[int64]deadRec{}, ended: map[int64]time.Time{}}
	errs := []string{"Connection REFUSED", "connection refused by peer", "Échec de connexion", "timeout"}
	var ds []store.DeadJob
	for range 90 {
		kind, class, reason, fp, _ := m.cause()
		ds = append(ds, store.DeadJob{Queue: m.pick(dlqQueues), Kind: kind, Payload: []byte(`{}`), MaxRetries: -1,
			DeadAt: at(time.Duration(m.r.IntN(4)) * time.Minute), Attempt: 1, DeadReason: reason,
			LastError: m.pick(errs), LastErrorClass: class, Fingerprint: fp})
	}
	jobs, err := x.s.AddDead(x.ctx, ds, at(time.Hour))
	if err != nil {
		x.t.Fatalf("AddDead: %v", err)
	}
	var recs []deadRec
	for i, j := range jobs {
		d := ds[i]
		class := d.LastErrorClass
		if class == failure.None {
			class = failure.Unknown
		}
		recs = append(recs, deadRec{id: j.ID, queue: d.Queue, kind: d.Kind, class: class, reason: d.DeadReason, fp: d.Fingerprint, err: d.LastError, deadAt: d.DeadAt})
	}
	for range 40 {
		f, keep := m.filter()
		var text string
		if m.r.IntN(3) == 0 {
			text = []string{"refused", "CONNECTION", "échec", "ÉCHEC DE"}[m.r.IntN(4)]
			f.ErrorContains = text
		}
		var match []deadRec
		for _, r := range recs {
			if keep(r) && (text == "" || strings.Contains(strings.ToLower(r.err), strings.ToLower(text))) {
				match = append(match, r)
			}
		}
		size := 1 + m.r.IntN(6)
		x.checkIDs(fmt.Sprintf("List(%+v), pages of %d", f, size), x.listIDs(f, size), deadOrder(match))
		if n, err := x.s.Count(x.ctx, f); err != nil || n != int64(len(match)) {
			x.t.Errorf("Count(%+v) = %d, %v; want %d", f, n, err, len(match))
		}
	}
}
