package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// Defaults of the dlq workload.
const (
	DefaultDLQJobs    = 100_000
	DefaultDLQQueues  = 3
	DefaultDLQCauses  = 20
	DefaultDLQPages   = 10
	DefaultDLQRepeat  = 10
	DefaultDLQRedrive = 10_000
	// dlqFillBatch is how many dead jobs one AddDead call inserts.
	dlqFillBatch = 1000
)

// DLQParams are the parameters of the dlq workload.
type DLQParams struct {
	Settings
	// Jobs dead jobs spread over Queues queues and Causes causes.
	Jobs   int `json:"jobs"`
	Queues int `json:"queues"`
	Causes int `json:"causes"`
	// Pages is how many pages each listing follows by cursor, from the
	// first page and from the middle of the DLQ.
	Pages int `json:"pages"`
	// Repeat is how many times each single call (groups, counts) is
	// timed.
	Repeat int `json:"repeat"`
	// Redrive is how many of the newest dead jobs a durable redrive
	// operation moves back to pending at the end (0: none).
	Redrive int `json:"redrive"`
}

// DLQTiming is the latency of one kind of call.
type DLQTiming struct {
	Name  string   `json:"name"`
	Calls int      `json:"calls"`
	P50   Duration `json:"p50_ms"`
	P99   Duration `json:"p99_ms"`
	Max   Duration `json:"max_ms"`
	// Rows is what the last call returned: jobs on the page, groups, or
	// the count.
	Rows int64 `json:"rows"`
}

// DLQResult is what the dlq workload measured.
type DLQResult struct {
	Meta
	Params   DLQParams `json:"params"`
	Fill     Duration  `json:"fill_ms"`
	FillRate float64   `json:"fill_jobs_per_s"`
	// Timings of the listings, groups and counts.
	Timings []DLQTiming `json:"timings"`
	// The durable redrive of the newest Redrive dead jobs.
	Redriven    int64    `json:"redriven"`
	RedriveTime Duration `json:"redrive_ms"`
	RedriveRate float64  `json:"redrive_jobs_per_s"`
	// StoreDead is the store's count of dead jobs at the end.
	StoreDead int64 `json:"store_dead"`
}

// Info implements Result.
func (r *DLQResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *DLQResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"dead jobs", fmt.Sprintf("%d in %d queues, %d causes (AddDead in batches of %d)", p.Jobs, p.Queues, p.Causes, dlqFillBatch)},
		{"pages followed", strconv.Itoa(p.Pages)},
		{"repeats", strconv.Itoa(p.Repeat)},
		{"redrive", strconv.Itoa(p.Redrive)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *DLQResult) Figures() []Figure {
	f := []Figure{{"fill", fmt.Sprintf("%d jobs in %s = %s", r.Params.Jobs, r.Fill, fmtRate(r.FillRate, "jobs"))}}
	for _, t := range r.Timings {
		f = append(f, Figure{t.Name, fmt.Sprintf("p50 %s  p99 %s  max %s  (%d calls, %d rows)", t.P50, t.P99, t.Max, t.Calls, t.Rows)})
	}
	if r.Params.Redrive > 0 {
		f = append(f, Figure{"durable redrive", fmt.Sprintf("%d jobs in %s = %s", r.Redriven, r.RedriveTime, fmtRate(r.RedriveRate, "jobs"))})
	}
	f = append(f, Figure{"store", fmt.Sprintf("%d dead at the end", r.StoreDead)})
	return f
}

// dlqCause is one cause of death of the generated dead jobs.
type dlqCause struct {
	kind, reason, err string
	class             failure.Class
}

func dlqCauses(n int) []dlqCause {
	out := make([]dlqCause, n)
	for i := range out {
		out[i] = dlqCause{
			kind:   "kind-" + strconv.Itoa(i%4),
			reason: "reason_" + strconv.Itoa(i),
			err:    fmt.Sprintf("cause %02d: upstream answered %d", i, 500+i),
			class:  failure.Classes[i%len(failure.Classes)],
		}
	}
	return out
}

func dlqFingerprint(queue string, c int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", queue, c)
	return fmt.Sprintf("%016x", h.Sum64())
}

// DLQ measures the dead-letter queue at depth: it fills a fresh store
// with p.Jobs dead jobs through Client.AddDead (one millisecond apart,
// the i-th in queue i mod Queues with cause i/Queues mod Causes), then
// times, through the Client (what the REST API's handlers call): the
// dead-only listing's first page and p.Pages pages by cursor from the
// top and from the middle, unfiltered and filtered by queue, kind,
// class, reason and an error-text prefix; the DLQ's groups (limit 200,
// as the dashboard asks); the counts, unfiltered and by each filter.
// Last, a durable redrive operation of the p.Redrive newest dead jobs.
func DLQ(ctx context.Context, cfg Config, p DLQParams) (*DLQResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case p.Jobs < 1 || p.Queues < 1 || p.Causes < 1:
		return nil, fmt.Errorf("bench: dlq: jobs, queues and causes must be at least 1")
	case p.Pages < 1 || p.Repeat < 1:
		return nil, fmt.Errorf("bench: dlq: pages and repeat must be at least 1")
	case p.Redrive < 0 || p.Redrive > p.Jobs:
		return nil, fmt.Errorf("bench: dlq: redrive must be between 0 and the number of jobs")
	}
	p.Settings = cfg.settings()
	res := &DLQResult{Params: p}
	r, err := newRig(ctx, cfg, "dlq")
	if err != nil {
		return nil, err
	}
	err = runDLQ(ctx, r, res)
	return finish(r, res, &res.Meta, err)
}

func runDLQ(ctx context.Context, r *rig, res *DLQResult) error {
	p := res.Params
	causes := dlqCauses(p.Causes)
	queues := make([]string, p.Queues)
	for i := range queues {
		queues[i] = "dlq-" + strconv.Itoa(i)
	}
	base := time.Now().Add(-time.Duration(p.Jobs) * time.Millisecond).Truncate(time.Millisecond).UTC()
	t0 := time.Now()
	batch := make([]store.DeadJob, 0, dlqFillBatch)
	for i := 0; i < p.Jobs; {
		batch = batch[:0]
		for ; i < p.Jobs && len(batch) < dlqFillBatch; i++ {
			q, c := i%p.Queues, (i/p.Queues)%p.Causes
			cs := &causes[c]
			at := base.Add(time.Duration(i) * time.Millisecond)
			msg := cs.err + " (job " + strconv.Itoa(i) + ")"
			batch = append(batch, store.DeadJob{
				Queue: queues[q], Kind: cs.kind, Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`),
				MaxRetries: -1, DeadAt: at, Attempt: 3, DeadReason: cs.reason, LastError: msg,
				LastErrorClass: cs.class, Fingerprint: dlqFingerprint(queues[q], c),
				History: []store.Event{{Kind: store.EventDead, Attempt: 3, At: at, Class: cs.class.String(), Error: msg, Reason: cs.reason}},
			})
		}
		if _, err := r.client.AddDead(ctx, batch); err != nil {
			return fmt.Errorf("bench: dlq: fill: %w", err)
		}
	}
	res.Fill = Duration(time.Since(t0))
	res.FillRate = float64(p.Jobs) / time.Since(t0).Seconds()

	dead := []store.State{store.Dead}
	mid := base.Add(time.Duration(p.Jobs/2) * time.Millisecond)
	midCursor := store.EncodeCursor(&store.Job{ID: int64(1) << 62, DeadAt: &mid}, true)
	filters := []struct {
		name string
		f    redrive.Filter
	}{
		{"", redrive.Filter{States: dead}},
		{"queue", redrive.Filter{States: dead, Queue: queues[len(queues)-1]}},
		{"kind", redrive.Filter{States: dead, Kind: causes[1%len(causes)].kind}},
		{"class", redrive.Filter{States: dead, Class: causes[2%len(causes)].class.String()}},
		{"reason", redrive.Filter{States: dead, Reason: causes[3%len(causes)].reason}},
		{"error text", redrive.Filter{States: dead, ErrorContains: causes[4%len(causes)].err[:8]}},
		// One cause in twenty: more than a listing sorts from the
		// prefix's index range, so its pages walk the newest dead jobs.
		{"error prefix", redrive.Filter{States: dead, ErrorPrefix: causes[4%len(causes)].err[:8]}},
		{"error prefix of all", redrive.Filter{States: dead, ErrorPrefix: "cause "}},
		{"error prefix of none", redrive.Filter{States: dead, ErrorPrefix: "no such error"}},
	}
	for _, fl := range filters {
		label := "list"
		if fl.name != "" {
			label += " by " + fl.name
		}
		first, err := timeList(ctx, r, label+", first page", fl.f, "", 1)
		if err != nil {
			return err
		}
		top, err := timeList(ctx, r, label+", pages from the top", fl.f, "", p.Pages)
		if err != nil {
			return err
		}
		deep, err := timeList(ctx, r, label+", pages from the middle", fl.f, midCursor, p.Pages)
		if err != nil {
			return err
		}
		res.Timings = append(res.Timings, first, top, deep)
	}
	t, err := timeCalls(p.Repeat, "groups (limit 200)", func() (int64, error) {
		gs, err := r.client.DeadGroups(ctx, redrive.Filter{}, 200)
		return int64(len(gs)), err
	})
	if err != nil {
		return err
	}
	res.Timings = append(res.Timings, t)
	t, err = timeCalls(p.Repeat, "groups by queue (limit 200)", func() (int64, error) {
		gs, err := r.client.DeadGroups(ctx, redrive.Filter{Queue: queues[0]}, 200)
		return int64(len(gs)), err
	})
	if err != nil {
		return err
	}
	res.Timings = append(res.Timings, t)
	t, err = timeCalls(p.Repeat, "groups by error prefix (limit 200)", func() (int64, error) {
		gs, err := r.client.DeadGroups(ctx, redrive.Filter{ErrorPrefix: causes[4%len(causes)].err[:8]}, 200)
		return int64(len(gs)), err
	})
	if err != nil {
		return err
	}
	res.Timings = append(res.Timings, t)
	for _, fl := range filters {
		label := "count"
		if fl.name != "" {
			label += " by " + fl.name
		}
		t, err := timeCalls(p.Repeat, label, func() (int64, error) { return r.client.Count(ctx, fl.f) })
		if err != nil {
			return err
		}
		res.Timings = append(res.Timings, t)
	}
	if p.Redrive > 0 {
		since := base.Add(time.Duration(p.Jobs-p.Redrive) * time.Millisecond)
		t0 := time.Now()
		op, err := r.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive,
			Filter: redrive.Filter{Since: since}, Batch: 1000, Note: "bench"})
		if err != nil {
			return fmt.Errorf("bench: dlq: redrive: %w", err)
		}
		if op, err = r.client.RunOperation(ctx, op.ID, nil); err != nil {
			return fmt.Errorf("bench: dlq: redrive: %w", err)
		}
		el := time.Since(t0)
		res.Redriven = op.Progress.Redriven
		res.RedriveTime, res.RedriveRate = Duration(el), float64(op.Progress.Redriven)/el.Seconds()
		if res.Redriven != int64(p.Redrive) {
			return fmt.Errorf("%w: the redrive moved %d jobs, want %d", ErrCheck, res.Redriven, p.Redrive)
		}
	}
	n, err := r.client.Count(ctx, redrive.Filter{States: dead})
	if err != nil {
		return fmt.Errorf("bench: dlq: %w", err)
	}
	res.StoreDead = n
	if want := int64(p.Jobs - p.Redrive); n != want {
		return fmt.Errorf("%w: the store counts %d dead jobs, want %d", ErrCheck, n, want)
	}
	return nil
}

// timeList times the first page of a listing from cursor and the pages
// after it, pages in all.
func timeList(ctx context.Context, r *rig, name string, f redrive.Filter, cursor string, pages int) (DLQTiming, error) {
	var durs []time.Duration
	var rows int64
	for range pages {
		t0 := time.Now()
		res, err := r.client.List(ctx, f, redrive.Page{Cursor: cursor, Limit: 50})
		durs = append(durs, time.Since(t0))
		if err != nil {
			return DLQTiming{}, fmt.Errorf("bench: dlq: %s: %w", name, err)
		}
		rows = int64(len(res.Jobs))
		if res.Next == "" {
			break
		}
		cursor = res.Next
	}
	return timing(name, durs, rows), nil
}

// timeCalls times n calls of fn.
func timeCalls(n int, name string, fn func() (int64, error)) (DLQTiming, error) {
	var durs []time.Duration
	var rows int64
	for range n {
		t0 := time.Now()
		v, err := fn()
		durs = append(durs, time.Since(t0))
		if err != nil {
			return DLQTiming{}, fmt.Errorf("bench: dlq: %s: %w", name, err)
		}
		rows = v
	}
	return timing(name, durs, rows), nil
}

func timing(name string, durs []time.Duration, rows int64) DLQTiming {
	slices.Sort(durs)
	q := func(f float64) Duration {
		i := int(f*float64(len(durs))+0.5) - 1
		return Duration(durs[max(0, min(i, len(durs)-1))])
	}
	return DLQTiming{Name: strings.TrimSpace(name), Calls: len(durs), P50: q(0.5), P99: q(0.99), Max: Duration(durs[len(durs)-1]), Rows: rows}
}
