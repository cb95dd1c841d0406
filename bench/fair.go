package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
)

// Defaults of the fair workload.
const (
	DefaultFairBig       = 100000
	DefaultFairSmallKeys = 20
	DefaultFairPerSmall  = 10
	// fairKind is the kind of the fair workload's jobs.
	fairKind = "bench.fair"
	// fairBigKey is the big tenant's key.
	fairBigKey = "big"
)

// FairParams are the fair workload's parameters.
type FairParams struct {
	Settings
	// Big jobs of one key are enqueued first, then PerSmall jobs of each
	// of SmallKeys other keys, all due, in a queue made fair on the
	// payload's tenant; then the worker starts.
	Big         int `json:"big"`
	SmallKeys   int `json:"small_keys"`
	PerSmall    int `json:"per_small"`
	InsertBatch int `json:"insert_batch"`
}

// FairResult is what the fair workload measured: how much of the big
// key's work was done when the last small job finished.
type FairResult struct {
	Meta
	Params FairParams `json:"params"`
	Insert Duration   `json:"insert_ms"`
	// BigAtLastSmall is how many of the big key's jobs had completed when
	// the last small job completed; Share is that over Big.
	BigAtLastSmall int64   `json:"big_done_at_last_small"`
	Share          float64 `json:"share"`
	// LastSmall is the time from the worker's start to the last small
	// job's completion.
	LastSmall Duration `json:"last_small_ms"`
	// Work is the time from the worker's start to the end of every job;
	// Rate is their number over it.
	Work Duration `json:"work_ms"`
	Rate float64  `json:"jobs_per_s"`
}

// Info implements Result.
func (r *FairResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *FairResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"big key", fmt.Sprintf("%d no-op jobs, enqueued first", p.Big)},
		{"small keys", fmt.Sprintf("%d keys of %d no-op jobs each, enqueued after", p.SmallKeys, p.PerSmall)},
		{"fair share", "the default queue, key payload.tenant, every weight 1"},
		{"insert batch", strconv.Itoa(p.InsertBatch)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *FairResult) Figures() []Figure {
	return []Figure{
		{"insert", r.Insert.String()},
		{"big jobs done at the last small one", fmt.Sprintf("%d of %d = %.2f%%", r.BigAtLastSmall, r.Params.Big, 100*r.Share)},
		{"last small job done after", r.LastSmall.String()},
		{"burn-down", fmt.Sprintf("%d jobs in %s = %s", int64(r.Params.Big+r.Params.SmallKeys*r.Params.PerSmall), r.Work, fmtRate(r.Rate, "jobs"))},
	}
}

// fairArgs is a fair job's payload.
type fairArgs struct {
	Tenant string `json:"tenant"`
	N      int    `json:"n"`
}

// Fair measures fair shares: one key with p.Big waiting jobs and
// p.SmallKeys keys with p.PerSmall jobs each, the big key's enqueued
// first, all due when the worker starts, in the default queue made fair
// on payload.tenant. It reports how many of the big key's jobs had
// completed when the last small job completed (the goal: the small jobs
// all finish within the first 2% of the big key's work).
func Fair(ctx context.Context, cfg Config, p FairParams) (*FairResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if p.Big < 1 || p.SmallKeys < 1 || p.PerSmall < 1 {
		return nil, fmt.Errorf("bench: fair: big, small keys and per small must be at least 1, got %d, %d and %d", p.Big, p.SmallKeys, p.PerSmall)
	}
	p.Settings, p.InsertBatch = cfg.settings(), depthInsertBatch
	r, err := newRig(ctx, cfg, "fair")
	if err != nil {
		return nil, err
	}
	res := &FairResult{Params: p}
	err = runFair(ctx, r, res)
	return finish(r, res, &res.Meta, err)
}

func runFair(ctx context.Context, r *rig, res *FairResult) error {
	p := res.Params
	if err := r.client.SetFairShares([]redrive.FairShare{{Queue: redrive.DefaultQueue, Key: "payload.tenant"}}); err != nil {
		return fmt.Errorf("bench: fair: %w", err)
	}
	t0 := time.Now()
	enq := func(tenant string, n int) error {
		reqs := make([]redrive.Request, 0, min(n, p.InsertBatch))
		for i := 0; i < n; {
			reqs = reqs[:0]
			for ; i < n && len(reqs) < p.InsertBatch; i++ {
				reqs = append(reqs, redrive.Request{Kind: fairKind, Payload: fairArgs{Tenant: tenant, N: i}})
			}
			if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
				return fmt.Errorf("bench: fair: insert: %w", err)
			}
		}
		return nil
	}
	if err := enq(fairBigKey, p.Big); err != nil {
		return err
	}
	for k := range p.SmallKeys {
		if err := enq(fmt.Sprintf("small-%02d", k), p.PerSmall); err != nil {
			return err
		}
	}
	res.Insert = Duration(time.Since(t0))

	small := p.SmallKeys * p.PerSmall
	done := newCounter(p.Big + small)
	var bigDone, smallDone atomic.Int64
	var mu sync.Mutex
	var start time.Time
	w := r.newWorker(nil)
	redrive.Handle(w, fairKind, func(ctx context.Context, job *redrive.Job, args fairArgs) error {
		if args.Tenant == fairBigKey {
			bigDone.Add(1)
		} else if smallDone.Add(1) == int64(small) {
			mu.Lock()
			res.BigAtLastSmall = bigDone.Load()
			res.LastSmall = Duration(time.Since(start))
			mu.Unlock()
		}
		done.inc()
		return nil
	})
	start = time.Now()
	r.start()
	if err := done.wait(ctx, r.cfg.StallTimeout, "fair"); err != nil {
		return err
	}
	work := time.Since(start)
	res.Work, res.Rate = Duration(work), rate(int64(p.Big+small), work)
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: fair: worker: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	res.Share = float64(res.BigAtLastSmall) / float64(p.Big)
	var c checks
	c.expect("small jobs completed", smallDone.Load(), int64(small))
	if res.Share > 0.02 {
		c.expect("big jobs done at the last small one (at most 2%)", res.BigAtLastSmall, int64(p.Big)/50)
	}
	return c.err("fair")
}
