// Package limiter applies redrive's concurrency and rate limits
// (redrive.ConcurrencyLimit) in one process, in memory: the broker
// transports' consumers, which have no store to keep them in, hold a
// message of a full or rate-held group with it. The semantics are the
// stores': at most Max jobs of a group run at once, and a group's starts
// follow a GCRA of the limit's rate and burst (the same emission
// interval, store.LimitRate.Interval, the same tolerance, (burst-1)
// intervals), so in any window of length d a group starts at most
// burst + d/interval jobs.
package limiter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// sweepEvery is how many grants pass between two sweeps of the groups
// that hold nothing (no running job, a tat past).
const sweepEvery = 1000

// Limiter holds the state of the groups of limits in one process: each
// group's running jobs and its GCRA's theoretical arrival time. It is
// safe for concurrent use.
type Limiter struct {
	// remote, when set, takes the starts of rate-limited groups
	// fleet-wide instead of the limiter's own GCRA.
	remote Remote

	mu     sync.Mutex
	now    func() time.Time
	groups map[groupKey]*group
	limits map[string]*counts
	grants int
}

type groupKey struct{ name, group string }

// group is one group's state.
type group struct {
	running int
	// tat is the GCRA's theoretical arrival time (zero: none yet).
	tat time.Time
	// freed is closed, and replaced, when a job of the group ends.
	freed chan struct{}
}

// counts are one limit's totals.
type counts struct {
	running, waiting, throttled int64
}

// New returns a limiter reading the time from now (time.Now when nil).
func New(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, groups: map[groupKey]*group{}, limits: map[string]*counts{}}
}

// Remote takes one start of sel's group under sel.Rate fleet-wide, at
// the time clock reads when it takes it (a store's TakeLimitStarts): ok,
// or not before next.
type Remote func(ctx context.Context, sel redrive.SelectedLimit, clock func() time.Time) (ok bool, next time.Time, err error)

// RemoteRetry is how long a job waits after its Remote failed before it
// tries again.
const RemoteRetry = time.Second

// SetRemote makes the limiter take the starts of every rate through
// remote (its own GCRA then keeps nothing); the slots stay in the
// process. Call it before the first Try.
func (l *Limiter) SetRemote(remote Remote) { l.remote = remote }

// Now returns the limiter's clock reading.
func (l *Limiter) Now() time.Time { return l.now() }

// Try takes, if it can now, a start of sel's group: a slot (the group
// runs fewer than sel.Max jobs, or sel.Max is 0) and the rate's leave
// (now ≥ tat - (burst-1)·interval, which moves tat to
// max(tat, now) + interval). Taken, the caller must Release it when the
// job ends. Not taken, next is the earliest time the rate allows a start
// (zero when the rate allows one now and a slot is what lacks), and freed
// closes when a job of the group ends: try again at whichever comes
// first.
//
// With a Remote, the rate is the Remote's: a free slot is taken, then
// the Remote asked (outside the limiter's lock); refused, or failed (then
// next is RemoteRetry away), the slot is given back.
func (l *Limiter) Try(ctx context.Context, sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}) {
	if l.remote == nil || sel.Rate.IsZero() {
		return l.try(sel)
	}
	local := sel
	local.Rate = store.LimitRate{}
	ok, _, freed = l.try(local)
	if !ok {
		return false, time.Time{}, freed
	}
	ok, next, err := l.remote(ctx, sel, l.now)
	if err != nil {
		ok, next = false, l.now().Add(RemoteRetry)
	}
	if ok {
		return true, time.Time{}, nil
	}
	l.Release(sel)
	l.mu.Lock()
	l.countsLocked(sel.Name).throttled++
	freed = nil // no slot lacks: wait for next
	if g := l.groups[groupKey{sel.Name, sel.Group}]; g != nil {
		freed = g.freed
	}
	l.mu.Unlock()
	return false, next, freed
}

// try is Try with the limiter's own GCRA.
func (l *Limiter) try(sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	k := groupKey{sel.Name, sel.Group}
	g := l.groups[k]
	if g == nil {
		g = &group{freed: make(chan struct{})}
		l.groups[k] = g
	}
	c := l.countsLocked(sel.Name)
	full := sel.Max > 0 && g.running >= sel.Max
	var tat time.Time
	if !sel.Rate.IsZero() {
		// The stores' GCRA, in their microseconds: next is set when
		// the rate allows no start now.
		_, tat, next = sel.Rate.Take(g.tat, now, 1)
	}
	if full || !next.IsZero() {
		if !next.IsZero() && !full {
			c.throttled++
		}
		return false, next, g.freed
	}
	if !sel.Rate.IsZero() {
		g.tat = tat
	}
	g.running++
	c.running++
	if l.grants++; l.grants >= sweepEvery {
		l.grants = 0
		l.sweepLocked(now)
	}
	return true, time.Time{}, nil
}

// Release ends a job of sel's group that Try let start: its slot frees,
// and the callers waiting on the group try again.
func (l *Limiter) Release(sel redrive.SelectedLimit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := groupKey{sel.Name, sel.Group}
	g := l.groups[k]
	if g == nil || g.running == 0 {
		panic("limiter: Release without a start")
	}
	g.running--
	l.countsLocked(sel.Name).running--
	close(g.freed)
	g.freed = make(chan struct{})
	if g.running == 0 && !g.tat.After(l.now()) {
		delete(l.groups, k)
	}
}

// sweepLocked forgets the groups that hold nothing: no running job, and
// a tat that is past (which says no more than no tat).
func (l *Limiter) sweepLocked(now time.Time) {
	for k, g := range l.groups {
		if g.running == 0 && !g.tat.After(now) {
			delete(l.groups, k)
		}
	}
}

func (l *Limiter) countsLocked(name string) *counts {
	c := l.limits[name]
	if c == nil {
		c = &counts{}
		l.limits[name] = c
	}
	return c
}

// Outcome is how Acquire ended.
type Outcome int

const (
	// Granted: the start is taken; Release it when the job ends.
	Granted Outcome = iota
	// Held: the hold's deadline passed first; nothing is taken.
	Held
	// Stopped: ctx ended first; nothing is taken.
	Stopped
)

// Acquire waits until sel's group may start a job, and takes the start,
// or until deadline (zero: none) or ctx's end. slot, when not nil, is
// called before each Try to take what the job needs besides (a handler
// slot): it blocks until it has it and returns its release, or false when
// ctx ended. When the Try fails the slot is given back before waiting, so
// a held job holds no handler. Granted, the release of the slot is
// returned with it. While it waits, the job counts as waiting on the
// limit (Stats).
func (l *Limiter) Acquire(ctx context.Context, sel redrive.SelectedLimit, deadline time.Time,
	slot func() (func(), bool)) (Outcome, func()) {
	waiting := false
	defer func() {
		if waiting {
			l.mu.Lock()
			l.countsLocked(sel.Name).waiting--
			l.mu.Unlock()
		}
	}()
	for {
		release := func() {}
		if slot != nil {
			r, ok := slot()
			if !ok {
				return Stopped, nil
			}
			release = r
		}
		ok, next, freed := l.Try(ctx, sel)
		if ok {
			return Granted, release
		}
		release()
		if !deadline.IsZero() && !l.now().Before(deadline) {
			return Held, nil
		}
		if !waiting {
			waiting = true
			l.mu.Lock()
			l.countsLocked(sel.Name).waiting++
			l.mu.Unlock()
		}
		wake := next
		if !deadline.IsZero() && (wake.IsZero() || deadline.Before(wake)) {
			wake = deadline
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(max(wake.Sub(l.now()), 0))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-freed:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return Stopped, nil
		}
	}
}

// Stat is one limit's use in the process.
type Stat struct {
	// Name is the limit's name.
	Name string `json:"name"`
	// InUse is how many jobs under the limit run now; Waiting, how many
	// wait on it; Throttled, how many times its rate held a job whose
	// group had a free slot (each time a held job was looked at again
	// counts once).
	InUse     int64 `json:"in_use"`
	Waiting   int64 `json:"waiting"`
	Throttled int64 `json:"throttled"`
}

// Stats returns each limit's use, sorted by name.
func (l *Limiter) Stats() []Stat {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Stat, 0, len(l.limits))
	for name, c := range l.limits {
		out = append(out, Stat{Name: name, InUse: c.running, Waiting: c.waiting, Throttled: c.throttled})
	}
	slices.SortFunc(out, func(a, b Stat) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// storeTimeout bounds one call of a store's TakeLimitStarts.
const storeTimeout = 10 * time.Second

// StoreRemote is a Remote that takes each start from st's rate state
// (TakeLimitStarts), fleet-wide: every process on the store, and the
// store's own limited fetches, count against one rate per group. A
// failed call is logged to log; the job then waits (RemoteRetry), so a
// store that cannot be reached lets no rate-limited job start.
func StoreRemote(st store.Limits, log *slog.Logger) Remote {
	return func(ctx context.Context, sel redrive.SelectedLimit, clock func() time.Time) (bool, time.Time, error) {
		cctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		took, next, err := st.TakeLimitStarts(cctx, sel.Name, sel.Group, sel.Rate, 1, clock)
		if err != nil {
			if ctx.Err() == nil { // not the consumer's shutdown
				log.Warn("limits: the store's rate state cannot be read; rate-limited jobs wait", "limit", sel.Name, "error", err)
			}
			return false, time.Time{}, fmt.Errorf("limiter: take a start of %q: %w", sel.Name, err)
		}
		return took == 1, next, nil
	}
}
