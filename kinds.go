package redrive

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// KindError is CheckKinds's refusal of a job whose queue has live
// workers none of which runs its kind: enqueued, it would only fail with
// "no handler registered" until it died. It wraps ErrInvalid.
type KindError struct {
	// Kind and Queue are the job's.
	Kind, Queue string
	// Runs are the kinds the live workers of Queue run, sorted.
	Runs []string
}

func (e *KindError) Error() string {
	runs := "no kind"
	if len(e.Runs) > 0 {
		runs = strings.Join(e.Runs, ", ")
	}
	return fmt.Sprintf("no live worker runs kind %q in queue %q: its workers run %s", e.Kind, e.Queue, runs)
}

// Unwrap returns ErrInvalid.
func (e *KindError) Unwrap() error { return ErrInvalid }

// fleetCacheFor is how long CheckKinds trusts a registry read that
// accepts a job: a read that would refuse it or warn is made again at
// once, so a worker that just registered is seen at once, and one that
// just stopped within this time.
const fleetCacheFor = time.Second

// fleetCache is the last registry read of CheckKinds.
type fleetCache struct {
	mu   sync.Mutex
	read time.Time // when (monotonic clock)
	ws   []WorkerStatus
}

// CheckKinds checks, before an enqueue, that each request's kind runs in
// its queue: that a live worker of the store (one Workers reports
// WorkerLive) serving the request's queue has a handler for its kind.
//
//   - When live workers serve the queue and none of them runs the kind,
//     the request is refused: the error is a *KindError (in a
//     *RequestError naming the request when there are several), wrapping
//     ErrInvalid.
//   - When no live worker serves the queue (none is registered yet, as
//     in a deployment whose workers start later, or the queue's workers
//     are stopped or silent), the request is accepted with a warning
//     saying so: warnings[i] is request i's, "" when there is none.
//   - A live worker that did not record its kinds (a version before
//     they were recorded) counts as running every kind.
//
// Enqueue and EnqueueMany do not call it; EnqueueChecked, which the
// API's and the CLI's enqueues use, does. The check and the enqueue are
// not atomic: a worker may stop in between.
func (c *Client) CheckKinds(ctx context.Context, reqs []Request) (warnings []string, err error) {
	ws, err := c.fleet.get(ctx, c, false)
	if err != nil {
		return nil, err
	}
	warnings, err = checkKinds(ws, reqs)
	if err == nil && !slices.ContainsFunc(warnings, func(w string) bool { return w != "" }) {
		return warnings, nil
	}
	// Refusals and warnings are made on a fresh read of the registry.
	if ws, err = c.fleet.get(ctx, c, true); err != nil {
		return nil, err
	}
	return checkKinds(ws, reqs)
}

// get returns the live workers, read again when fresh or when the last
// read is older than fleetCacheFor.
func (f *fleetCache) get(ctx context.Context, c *Client, fresh bool) ([]WorkerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fresh && f.ws != nil && time.Since(f.read) < fleetCacheFor {
		return f.ws, nil
	}
	all, err := c.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: check kinds: %w", err)
	}
	live := []WorkerStatus{}
	for _, w := range all {
		if w.State == WorkerLive {
			live = append(live, w)
		}
	}
	f.ws, f.read = live, time.Now()
	return live, nil
}

// checkKinds is CheckKinds on the live workers ws.
func checkKinds(ws []WorkerStatus, reqs []Request) ([]string, error) {
	warnings := make([]string, len(reqs))
	for i, r := range reqs {
		q := r.Queue
		if q == "" {
			q = DefaultQueue
		}
		served, runsIt := false, false
		runs := map[string]bool{}
		for _, w := range ws {
			if _, ok := w.Queues[q]; !ok {
				continue
			}
			served = true
			if w.Kinds == nil || slices.Contains(w.Kinds, r.Kind) {
				runsIt = true
				break
			}
			for _, k := range w.Kinds {
				runs[k] = true
			}
		}
		switch {
		case runsIt:
		case !served && len(ws) == 0:
			warnings[i] = fmt.Sprintf("no live worker is registered on the store: kind %q is not checked, and the job waits until a worker of queue %q runs it", r.Kind, q)
		case !served:
			warnings[i] = fmt.Sprintf("no live worker serves queue %q: kind %q is not checked, and the job waits until a worker of the queue runs it", q, r.Kind)
		default:
			var err error = &KindError{Kind: r.Kind, Queue: q, Runs: slices.Sorted(maps.Keys(runs))}
			if len(reqs) > 1 {
				err = &RequestError{Index: i, Of: len(reqs), Err: err}
			}
			return nil, err
		}
	}
	return warnings, nil
}

// OperationKindError is the refusal of a redrive or a replay some of
// whose selected jobs are in a queue whose live workers run none of their
// kinds: run again, they would only fail with "no handler registered"
// until they died. It wraps ErrInvalid.
type OperationKindError struct {
	// Queue is the queue; Jobs how many selected jobs of it have a kind
	// its live workers do not run; Kinds those kinds, when the selection
	// names one (else nil); Runs the kinds its live workers run, sorted.
	Queue string
	Jobs  int64
	Kinds []string
	Runs  []string
}

func (e *OperationKindError) Error() string {
	runs := "no kind"
	if len(e.Runs) > 0 {
		runs = strings.Join(e.Runs, ", ")
	}
	what := "kinds"
	if len(e.Kinds) > 0 {
		what = fmt.Sprintf("kind %q", strings.Join(e.Kinds, ", "))
	}
	return fmt.Sprintf("%d of the selected jobs are in queue %q and of %s no live worker of it runs (its workers run %s): "+
		"they would fail with \"no handler registered\" until dead; start a worker that runs them, or narrow the selection (kind)",
		e.Jobs, e.Queue, what, runs)
}

// Unwrap returns ErrInvalid.
func (e *OperationKindError) Unwrap() error { return ErrInvalid }

// CheckOperationKinds checks, before a redrive or a replay of the jobs f
// selects, that their kinds run in their queues, as CheckKinds does for
// an enqueue: for each queue served by live workers that all recorded
// their kinds, the selected jobs of that queue must be of those kinds,
// or it returns an *OperationKindError. Queues no live worker serves are
// not checked (the jobs wait for a worker), nor are those served by a
// worker that did not record its kinds. It counts the selection once per
// served queue and kind; when the counts leave jobs unaccounted for, it
// reads that queue's selection once to find them (counts taken one
// after another may differ only because jobs left meanwhile).
func (c *Client) CheckOperationKinds(ctx context.Context, f Filter) error {
	ws, err := c.fleet.get(ctx, c, true)
	if err != nil {
		return err
	}
	runs := map[string]map[string]bool{} // queue -> kinds; nil: any
	for _, w := range ws {
		for q := range w.Queues {
			k, seen := runs[q]
			switch {
			case w.Kinds == nil:
				runs[q] = nil
			case seen && k == nil:
			default:
				if k == nil {
					k = map[string]bool{}
					runs[q] = k
				}
				for _, kind := range w.Kinds {
					k[kind] = true
				}
			}
		}
	}
	count := func(f Filter) (int64, error) {
		n, err := c.store.Count(ctx, f)
		if err != nil {
			return 0, fmt.Errorf("redrive: check kinds: %w", err)
		}
		return n, nil
	}
	for _, q := range slices.Sorted(maps.Keys(runs)) {
		kinds := runs[q]
		if kinds == nil || (f.Queue != "" && f.Queue != q) {
			continue
		}
		fq := f
		fq.Queue = q
		if f.Kind != "" {
			if kinds[f.Kind] {
				continue
			}
			n, err := count(fq)
			if err != nil {
				return err
			}
			if n > 0 {
				return &OperationKindError{Queue: q, Jobs: n, Kinds: []string{f.Kind}, Runs: slices.Sorted(maps.Keys(kinds))}
			}
			continue
		}
		total, err := count(fq)
		if err != nil {
			return err
		}
		if total == 0 {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			fk := fq
			fk.Kind = k
			n, err := count(fk)
			if err != nil {
				return err
			}
			total -= n
		}
		if total <= 0 {
			continue
		}
		// The counts are not one snapshot: jobs of kinds that run may
		// have left the selection between them (a purge, retention,
		// another redrive) and look like jobs no worker runs. Only jobs
		// actually seen with such a kind refuse the operation.
		n, err := c.countUnrun(ctx, fq, kinds)
		if err != nil {
			return err
		}
		if n > 0 {
			return &OperationKindError{Queue: q, Jobs: n, Runs: slices.Sorted(maps.Keys(kinds))}
		}
	}
	return nil
}

// countUnrun counts, in one pass over the jobs f selects (a page at a
// time), those whose kind is not in kinds.
func (c *Client) countUnrun(ctx context.Context, f Filter, kinds map[string]bool) (int64, error) {
	var n int64
	p := store.Page{Limit: store.MaxPageSize}
	for {
		res, err := c.store.List(ctx, f, p)
		if err != nil {
			return 0, fmt.Errorf("redrive: check kinds: %w", err)
		}
		for _, j := range res.Jobs {
			if !kinds[j.Kind] {
				n++
			}
		}
		if res.Next == "" {
			return n, nil
		}
		p.Cursor = res.Next
	}
}
