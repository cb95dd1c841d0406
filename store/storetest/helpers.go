package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// base is the suite's fixed clock origin. It carries microseconds so that a
// store dropping them (keeping milliseconds or seconds) fails.
var base = time.Date(2026, time.January, 2, 3, 4, 5, 678901000, time.UTC)

// at returns base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

// tp returns a pointer to t.
func tp(t time.Time) *time.Time { return &t }

// raw returns s as a JSON message.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

// missingID is an id no subtest ever creates.
const missingID int64 = 1 << 40

// h bundles a subtest's testing.T, store and context with the helpers that
// fail the subtest on unexpected errors.
type h struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
}

// enqueue enqueues jobs at now and fails unless it returns one job per
// input.
func (x *h) enqueue(now time.Time, jobs ...store.NewJob) []*store.Job {
	x.t.Helper()
	got, err := x.s.Enqueue(x.ctx, jobs, now)
	if err != nil {
		x.t.Fatalf("Enqueue(%d jobs): %v", len(jobs), err)
	}
	if len(got) != len(jobs) {
		x.t.Fatalf("Enqueue(%d jobs) returned %d jobs", len(jobs), len(got))
	}
	for i, j := range got {
		if j == nil {
			x.t.Fatalf("Enqueue returned a nil job at index %d", i)
		}
	}
	return got
}

// enqueueMany enqueues jobs in chunks of at most 500 and returns them all.
func (x *h) enqueueMany(now time.Time, jobs []store.NewJob) []*store.Job {
	x.t.Helper()
	var out []*store.Job
	for len(jobs) > 0 {
		n := min(len(jobs), 500)
		out = append(out, x.enqueue(now, jobs[:n]...)...)
		jobs = jobs[n:]
	}
	return out
}

// fetch calls Fetch and fails on an error.
func (x *h) fetch(p store.FetchParams) []*store.Job {
	x.t.Helper()
	got, err := x.s.Fetch(x.ctx, p)
	if err != nil {
		x.t.Fatalf("Fetch(queue %q, limit %d, now %s): %v", p.Queue, p.Limit, p.Now, err)
	}
	for i, j := range got {
		if j == nil {
			x.t.Fatalf("Fetch returned a nil job at index %d", i)
		}
	}
	return got
}

// fetchWant fetches with p and fails unless exactly the jobs with the
// given ids come back (in any order). It returns them in the order of want.
func (x *h) fetchWant(p store.FetchParams, want ...int64) []*store.Job {
	x.t.Helper()
	got := x.fetch(p)
	byID := map[int64]*store.Job{}
	for _, j := range got {
		byID[j.ID] = j
	}
	if len(got) != len(want) || len(byID) != len(want) {
		x.t.Fatalf("Fetch(queue %q, limit %d, now %s) leased ids %v, want %v", p.Queue, p.Limit, p.Now, sortedIDs(got), sorted(want))
	}
	out := make([]*store.Job, len(want))
	for i, id := range want {
		j, ok := byID[id]
		if !ok {
			x.t.Fatalf("Fetch(queue %q, limit %d, now %s) leased ids %v, want %v", p.Queue, p.Limit, p.Now, sortedIDs(got), sorted(want))
		}
		out[i] = j
	}
	return out
}

// leaseNew enqueues jobs of one queue at now (their RunAt must be zero or
// not after now) and leases them all to worker at now for one minute. The
// queue must hold no other due job. It returns the leased jobs in the
// order given.
func (x *h) leaseNew(now time.Time, worker string, jobs ...store.NewJob) []*store.Job {
	x.t.Helper()
	if len(jobs) == 0 {
		return nil
	}
	queue := jobs[0].Queue
	for _, j := range jobs {
		if j.Queue != queue {
			x.t.Fatalf("suite bug: leaseNew with queues %q and %q", queue, j.Queue)
		}
	}
	created := x.enqueueMany(now, jobs)
	want := map[int64]int{}
	for i, j := range created {
		want[j.ID] = i
	}
	out := make([]*store.Job, len(created))
	left := len(created)
	for left > 0 {
		got := x.fetch(store.FetchParams{Queue: queue, Limit: min(left, 500), Now: now, LeaseUntil: now.Add(time.Minute), Worker: worker})
		if len(got) == 0 {
			x.t.Fatalf("Fetch(queue %q) leased nothing with %d of the jobs just enqueued still due", queue, left)
		}
		for _, j := range got {
			i, ok := want[j.ID]
			if !ok || out[i] != nil {
				x.t.Fatalf("Fetch(queue %q) leased job %d, which is not one of the due jobs just enqueued (or was leased twice)", queue, j.ID)
			}
			out[i] = j
			left--
		}
	}
	return out
}

// finish applies outcomes in chunks of at most 500 and fails unless every
// one was applied.
func (x *h) finish(outs ...store.Outcome) {
	x.t.Helper()
	for len(outs) > 0 {
		n := min(len(outs), 500)
		applied := x.finishApplied(outs[:n]...)
		for i, ok := range applied {
			if !ok {
				o := outs[i]
				x.t.Fatalf("Finish: outcome %d (job %d, attempt %d, worker %q, kind %d) was not applied, want applied", i, o.JobID, o.Attempt, o.Worker, o.Kind)
			}
		}
		outs = outs[n:]
	}
}

// finishApplied calls Finish and fails on an error or a result of the
// wrong length.
func (x *h) finishApplied(outs ...store.Outcome) []bool {
	x.t.Helper()
	applied, err := x.s.Finish(x.ctx, outs)
	if err != nil {
		x.t.Fatalf("Finish(%d outcomes): %v", len(outs), err)
	}
	if len(applied) != len(outs) {
		x.t.Fatalf("Finish(%d outcomes) returned %d results", len(outs), len(applied))
	}
	return applied
}

// get returns the job with the given id and fails on an error.
func (x *h) get(id int64) *store.Job {
	x.t.Helper()
	j, err := x.s.Get(x.ctx, id)
	if err != nil {
		x.t.Fatalf("Get(%d): %v", id, err)
	}
	if j == nil {
		x.t.Fatalf("Get(%d) returned nil and no error", id)
	}
	return j
}

// notFound fails unless Get reports ErrNotFound for id.
func (x *h) notFound(id int64) {
	x.t.Helper()
	j, err := x.s.Get(x.ctx, id)
	if !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("Get(%d) = %v, %v; want an error wrapping store.ErrNotFound", id, j, err)
	}
}

// list calls List and fails on an error.
func (x *h) list(f store.Filter, p store.Page) store.ListResult {
	x.t.Helper()
	res, err := x.s.List(x.ctx, f, p)
	if err != nil {
		x.t.Fatalf("List(%+v, %+v): %v", f, p, err)
	}
	return res
}

// listAll walks every page of f with the given page size and returns the
// jobs in listing order. It fails if a non-last page is short, if the walk
// does not end, or if a job comes twice.
func (x *h) listAll(f store.Filter, size int) []*store.Job {
	x.t.Helper()
	var all []*store.Job
	seen := map[int64]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page > 100000 {
			x.t.Fatalf("List(%+v) pages never end", f)
		}
		res := x.list(f, store.Page{Cursor: cursor, Limit: size})
		for _, j := range res.Jobs {
			if j == nil {
				x.t.Fatalf("List(%+v) returned a nil job", f)
			}
			if seen[j.ID] {
				x.t.Fatalf("List(%+v, page size %d) returned job %d twice (page %d)", f, size, j.ID, page)
			}
			seen[j.ID] = true
		}
		all = append(all, res.Jobs...)
		if res.Next == "" {
			return all
		}
		if len(res.Jobs) != size {
			x.t.Fatalf("List(%+v, page size %d): page %d has %d jobs and a Next cursor; want full pages before the last", f, size, page, len(res.Jobs))
		}
		if res.Next == cursor {
			x.t.Fatalf("List(%+v): page %d returned its own cursor %q as Next", f, page, cursor)
		}
		cursor = res.Next
	}
}

// listIDs is listAll reduced to ids.
func (x *h) listIDs(f store.Filter, size int) []int64 {
	x.t.Helper()
	return jobIDs(x.listAll(f, size))
}

// stats calls Stats and fails on an error.
func (x *h) stats() store.Stats {
	x.t.Helper()
	st, err := x.s.Stats(x.ctx)
	if err != nil {
		x.t.Fatalf("Stats: %v", err)
	}
	return st
}

// cancel calls Cancel and fails on an error.
func (x *h) cancel(id int64, now time.Time) *store.Job {
	x.t.Helper()
	j, err := x.s.Cancel(x.ctx, id, now)
	if err != nil {
		x.t.Fatalf("Cancel(%d): %v", id, err)
	}
	if j == nil {
		x.t.Fatalf("Cancel(%d) returned nil and no error", id)
	}
	return j
}

// redrive calls Redrive and fails on an error.
func (x *h) redrive(p store.RedriveParams) store.RedriveResult {
	x.t.Helper()
	res, err := x.s.Redrive(x.ctx, p)
	if err != nil {
		x.t.Fatalf("Redrive(%v): %v", p.IDs, err)
	}
	return res
}

// groups calls Groups and fails on an error.
func (x *h) groups(f store.Filter, limit int) []store.Group {
	x.t.Helper()
	g, err := x.s.Groups(x.ctx, f, limit)
	if err != nil {
		x.t.Fatalf("Groups(%+v, %d): %v", f, limit, err)
	}
	return g
}

// expired calls Expired and fails on an error.
func (x *h) expired(now time.Time, limit int) []*store.Job {
	x.t.Helper()
	got, err := x.s.Expired(x.ctx, now, limit)
	if err != nil {
		x.t.Fatalf("Expired(%s, %d): %v", now, limit, err)
	}
	return got
}

// heartbeat calls Heartbeat with the leases of jobs and fails on an
// error; it returns the ids of the jobs to cancel, sorted.
func (x *h) heartbeat(worker string, jobs []*store.Job, until time.Time) []int64 {
	x.t.Helper()
	res := x.heartbeatLeases(worker, leasesOf(jobs...), until)
	var ids []int64
	for _, l := range res.Canceled {
		ids = append(ids, l.JobID)
	}
	return sorted(ids)
}

// heartbeatLeases calls Heartbeat and fails on an error, or unless it
// reports each lease given once at most in each list, sorted.
func (x *h) heartbeatLeases(worker string, leases []store.Lease, until time.Time) store.HeartbeatResult {
	x.t.Helper()
	res, err := x.s.Heartbeat(x.ctx, worker, leases, until)
	if err != nil {
		x.t.Fatalf("Heartbeat(%q, %v): %v", worker, leases, err)
	}
	for _, list := range [][]store.Lease{res.Canceled, res.Lost} {
		if !slices.IsSortedFunc(list, compareLeases) || len(slices.Compact(slices.Clone(list))) != len(list) {
			x.t.Errorf("Heartbeat(%q, %v) = %+v: lists not sorted by job id, or with repeats", worker, leases, res)
		}
		for _, l := range list {
			if !slices.Contains(leases, l) {
				x.t.Errorf("Heartbeat(%q, %v) = %+v: reports lease %v, not given", worker, leases, res, l)
			}
		}
	}
	return res
}

// leasesOf returns the leases the jobs hold.
func leasesOf(jobs ...*store.Job) []store.Lease {
	out := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		out[i] = store.LeaseOf(j)
	}
	return out
}

func compareLeases(a, b store.Lease) int {
	if a.JobID != b.JobID {
		if a.JobID < b.JobID {
			return -1
		}
		return 1
	}
	switch {
	case a.Token < b.Token:
		return -1
	case a.Token > b.Token:
		return 1
	}
	return 0
}

// counter returns Counters[queue][name] of the current stats.
func (x *h) counter(queue, name string) int64 {
	x.t.Helper()
	return x.stats().Counters[queue][name]
}

// Outcome builders. Each fences on the leased job's lease and worker.

func outcome(j *store.Job, kind store.OutcomeKind, when time.Time) store.Outcome {
	return store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: kind, At: when}
}

func completeOf(j *store.Job, when time.Time) store.Outcome {
	return outcome(j, store.Complete, when)
}

func retryOf(j *store.Job, when, runAt time.Time, class failure.Class, msg string) store.Outcome {
	o := outcome(j, store.Retry, when)
	o.RunAt = runAt
	o.Class = class
	o.Error = msg
	return o
}

func buryOf(j *store.Job, when time.Time, class failure.Class, reason, fingerprint, msg string) store.Outcome {
	o := outcome(j, store.Bury, when)
	o.Class = class
	o.DeadReason = reason
	o.Fingerprint = fingerprint
	o.Error = msg
	return o
}

// deadSpec describes a job to create dead.
type deadSpec struct {
	job    store.NewJob
	deadAt time.Time
	class  failure.Class
	reason string
	fp     string
	err    string
}

// makeDead creates the jobs of specs (one queue, which must hold no due
// job) at now, leases them and buries each at its deadAt. It returns the
// ids in the order of specs.
func (x *h) makeDead(now time.Time, specs ...deadSpec) []int64 {
	x.t.Helper()
	jobs := make([]store.NewJob, len(specs))
	for i, sp := range specs {
		jobs[i] = sp.job
	}
	leased := x.leaseNew(now, "fixture", jobs...)
	outs := make([]store.Outcome, len(specs))
	for i, sp := range specs {
		outs[i] = buryOf(leased[i], sp.deadAt, sp.class, sp.reason, sp.fp, sp.err)
	}
	x.finish(outs...)
	return jobIDs(leased)
}

// Comparison helpers.

func jobIDs(jobs []*store.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func sorted(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

func sortedIDs(jobs []*store.Job) []int64 { return sorted(jobIDs(jobs)) }

// sameTime reports whether a and b are the same instant to the microsecond.
func sameTime(a, b time.Time) bool {
	return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
}

// fmtTime formats a time for comparison and messages.
func fmtTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
}

func fmtProgress(p *store.JobProgress) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%d/%d at %s", p.Done, p.Total, fmtTime(p.At))
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "<nil>"
	}
	return fmtTime(*t)
}

// canonJSON returns a JSON value re-encoded with sorted keys, so that two
// encodings of one value compare equal. Empty input gives "<empty>".
func canonJSON(b []byte) string {
	if len(bytes.TrimSpace(b)) == 0 {
		return "<empty>"
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "<invalid JSON " + string(b) + ">"
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "<invalid JSON " + string(b) + ">"
	}
	return string(out)
}

// canonPolicy is canonJSON where no policy and JSON null are the same.
func canonPolicy(b []byte) string {
	c := canonJSON(b)
	if c == "<empty>" || c == "null" {
		return "<none>"
	}
	return c
}

func jsonEqual(a, b []byte) bool { return canonJSON(a) == canonJSON(b) }

// fmtEvent formats an event for comparison.
func fmtEvent(e store.Event) string {
	return fmt.Sprintf("{%s attempt=%d at=%s duration=%s class=%q error=%q reason=%q delay=%s worker=%q note=%q}",
		e.Kind, e.Attempt, fmtTime(e.At), time.Duration(e.Duration), e.Class, e.Error, e.Reason, time.Duration(e.Delay), e.Worker, e.Note)
}

func fmtHistory(h []store.Event) string {
	parts := make([]string, len(h))
	for i, e := range h {
		parts[i] = fmtEvent(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// jobFields lists every field of a job in a comparable form.
func jobFields(j *store.Job) [][2]string {
	return [][2]string{
		{"ID", fmt.Sprint(j.ID)},
		{"Queue", j.Queue},
		{"Kind", j.Kind},
		{"Payload", canonJSON(j.Payload)},
		{"State", string(j.State)},
		{"Attempt", fmt.Sprint(j.Attempt)},
		{"MaxRetries", fmt.Sprint(j.MaxRetries)},
		{"Policy", canonPolicy(j.Policy)},
		{"IdempotencyKey", j.IdempotencyKey},
		{"Dependency", j.Dependency},
		{"Priority", fmt.Sprint(j.Priority)},
		{"Reprocessable", fmt.Sprint(j.Reprocessable)},
		{"CreatedAt", fmtTime(j.CreatedAt)},
		{"RunAt", fmtTime(j.RunAt)},
		{"AttemptedAt", fmtTimePtr(j.AttemptedAt)},
		{"FinishedAt", fmtTimePtr(j.FinishedAt)},
		{"LeaseUntil", fmtTimePtr(j.LeaseUntil)},
		{"Worker", j.Worker},
		{"CancelRequested", fmt.Sprint(j.CancelRequested)},
		{"RetryCount", fmt.Sprint(j.RetryCount)},
		{"LastError", j.LastError},
		{"LastErrorClass", j.LastErrorClass.String()},
		{"LastFailedAt", fmtTimePtr(j.LastFailedAt)},
		{"DeadAt", fmtTimePtr(j.DeadAt)},
		{"DeadReason", j.DeadReason},
		{"Fingerprint", j.Fingerprint},
		{"Redriven", fmt.Sprint(j.Redriven)},
		{"Trace", j.Trace},
		{"LastDelay", fmt.Sprint(time.Duration(j.LastDelay))},
		{"Progress", fmtProgress(j.Progress)},
		{"History", fmtHistory(j.History)},
		{"Existing", fmt.Sprint(j.Existing)},
	}
}

// checkJob compares every field of got with want, except the fields named
// in ignore (for fields the contract leaves to the store). what names the
// check in messages.
func (x *h) checkJob(what string, got, want *store.Job, ignore ...string) {
	x.t.Helper()
	if got == nil {
		x.t.Errorf("%s: job is nil", what)
		return
	}
	skip := map[string]bool{}
	gf, wf := jobFields(got), jobFields(want)
	for _, name := range ignore {
		found := false
		for _, f := range wf {
			found = found || f[0] == name
		}
		if !found {
			panic("storetest: checkJob ignores unknown field " + name)
		}
		skip[name] = true
	}
	for i := range wf {
		name := wf[i][0]
		if skip[name] {
			continue
		}
		if gf[i][1] != wf[i][1] {
			x.t.Errorf("%s: job %d: %s = %s, want %s", what, want.ID, name, gf[i][1], wf[i][1])
		}
	}
}

// clone returns a copy of j whose History may be appended to freely.
func clone(j *store.Job) *store.Job {
	c := *j
	c.History = slices.Clone(j.History)
	return &c
}

// checkIDs fails unless got equals want, in order.
func (x *h) checkIDs(what string, got, want []int64) {
	x.t.Helper()
	if !slices.Equal(got, want) {
		x.t.Errorf("%s: ids %v, want %v", what, got, want)
	}
}

// checkIDSet fails unless got and want hold the same ids, in any order.
func (x *h) checkIDSet(what string, got, want []int64) {
	x.t.Helper()
	if !slices.Equal(sorted(got), sorted(want)) {
		x.t.Errorf("%s: ids %v, want %v (in any order)", what, sorted(got), sorted(want))
	}
}

// checkErr fails unless err wraps target.
func (x *h) checkErr(what string, err, target error) {
	x.t.Helper()
	if !errors.Is(err, target) {
		x.t.Errorf("%s: error %v, want an error wrapping %q", what, err, target)
	}
}

// deadOrder sorts records as a dead-only listing: dead_at descending, then
// id descending.
func deadOrder(recs []deadRec) []int64 {
	rs := slices.Clone(recs)
	sort.Slice(rs, func(i, j int) bool {
		if !rs[i].deadAt.Equal(rs[j].deadAt) {
			return rs[i].deadAt.After(rs[j].deadAt)
		}
		return rs[i].id > rs[j].id
	})
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	return ids
}

// deadRec is the suite's model of one dead job, for expected listings and
// groups.
type deadRec struct {
	id     int64
	queue  string
	kind   string
	class  failure.Class
	reason string
	fp     string
	err    string
	deadAt time.Time
}

// wantGroups computes the groups of the records kept by keep, largest
// first (ties by fingerprint, which fixtures avoid relying on), at most
// limit.
func wantGroups(recs []deadRec, keep func(deadRec) bool, limit int) []store.Group {
	byFP := map[string]*store.Group{}
	var order []string
	for _, r := range recs {
		if keep != nil && !keep(r) {
			continue
		}
		g, ok := byFP[r.fp]
		if !ok {
			g = &store.Group{Fingerprint: r.fp, First: r.deadAt, Last: r.deadAt, Sample: r.err, SampleID: r.id,
				Class: r.class.String(), Reason: r.reason, Queue: r.queue, Kind: r.kind}
			byFP[r.fp] = g
			order = append(order, r.fp)
		}
		g.Count++
		if r.deadAt.Before(g.First) {
			g.First = r.deadAt
		}
		if r.deadAt.After(g.Last) || (r.deadAt.Equal(g.Last) && r.id > g.SampleID) {
			g.Last = r.deadAt
			g.Sample = r.err
			g.SampleID = r.id
			// The group shows its sample's cause.
			g.Class, g.Reason, g.Queue, g.Kind = r.class.String(), r.reason, r.queue, r.kind
		}
	}
	out := make([]store.Group, 0, len(order))
	for _, fp := range order {
		out = append(out, *byFP[fp])
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Fingerprint < out[j].Fingerprint
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// checkGroups compares groups with the model: same groups, largest first,
// every field equal. Groups of equal size may come in any order.
func (x *h) checkGroups(what string, got, want []store.Group) {
	x.t.Helper()
	fps := func(gs []store.Group) []string {
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = fmt.Sprintf("%s(%d)", g.Fingerprint, g.Count)
		}
		return out
	}
	if len(got) != len(want) {
		x.t.Errorf("%s: groups %v, want %v", what, fps(got), fps(want))
		return
	}
	for i := 1; i < len(got); i++ {
		if got[i].Count > got[i-1].Count {
			x.t.Errorf("%s: groups %v are not largest first", what, fps(got))
		}
	}
	wantBy := map[string]store.Group{}
	for _, g := range want {
		wantBy[g.Fingerprint] = g
	}
	for _, g := range got {
		w, ok := wantBy[g.Fingerprint]
		if !ok {
			x.t.Errorf("%s: unexpected group %q; groups %v, want %v", what, g.Fingerprint, fps(got), fps(want))
			continue
		}
		gs := fmt.Sprintf("count=%d first=%s last=%s sample=%q sample_id=%d class=%q reason=%q queue=%q kind=%q",
			g.Count, fmtTime(g.First), fmtTime(g.Last), g.Sample, g.SampleID, g.Class, g.Reason, g.Queue, g.Kind)
		ws := fmt.Sprintf("count=%d first=%s last=%s sample=%q sample_id=%d class=%q reason=%q queue=%q kind=%q",
			w.Count, fmtTime(w.First), fmtTime(w.Last), w.Sample, w.SampleID, w.Class, w.Reason, w.Queue, w.Kind)
		if gs != ws {
			x.t.Errorf("%s: group %q:\n got %s\nwant %s", what, g.Fingerprint, gs, ws)
		}
	}
}

// normJobs drops zero counts and empty queues from Stats.Jobs.
func normJobs(m map[string]map[store.State]int64) map[string]map[store.State]int64 {
	out := map[string]map[store.State]int64{}
	for q, byState := range m {
		for st, n := range byState {
			if n == 0 {
				continue
			}
			if out[q] == nil {
				out[q] = map[store.State]int64{}
			}
			out[q][st] = n
		}
	}
	return out
}

// normCounters drops zero counters and empty queues from Stats.Counters.
func normCounters(m map[string]map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for q, byName := range m {
		for name, n := range byName {
			if n == 0 {
				continue
			}
			if out[q] == nil {
				out[q] = map[string]int64{}
			}
			out[q][name] = n
		}
	}
	return out
}
