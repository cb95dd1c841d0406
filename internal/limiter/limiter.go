// Package limiter applies redrive's concurrency and rate limits
// (redrive.ConcurrencyLimit) in one process, in memory, or fleet-wide
// through a store (SetRemote for the rates, SetSlots for the slots): the
// broker transports' consumers, whose messages have no row in a store,
// hold a message of a full or rate-held group with it. The semantics are the
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
	// fleet-wide instead of the limiter's own GCRA; slots, when set,
	// the slots of groups with a max instead of the limiter's counts.
	remote Remote
	slots  Slots

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
	// taking counts the Slots.Take calls under way for the group;
	// tokens are the group's slots the process holds from Slots (one
	// per running job of the group, but those whose Take is not done).
	taking int
	tokens []int64
	// fullRefusals counts the looks refused because the group was
	// full: a start given back (its Remote refused it) wakes the
	// waiters only if one was refused while it held the slot.
	fullRefusals uint64
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

// Slots keep, outside the process, the slots of the groups of limits
// with a max: the part of the limiter's Remote hook that holds
// concurrency fleet-wide (StoreSlots).
type Slots interface {
	// Take takes a slot of sel's group (under sel.Max, or the max the
	// slots' keeper knows for the limit), held until Release: its token,
	// or 0 when the group is full. A failed Take took nothing.
	Take(ctx context.Context, sel redrive.SelectedLimit) (token int64, err error)
	// Release gives back the slot token names. It does not fail: a slot
	// that cannot be given back is freed by its lease's end.
	Release(token int64)
}

// SetSlots makes the limiter take the slots of every limit with a max
// from slots (its own counts then cap nothing; a group's rate is still
// the limiter's own GCRA's, or its Remote's). Call it before the first
// Try.
func (l *Limiter) SetSlots(slots Slots) { l.slots = slots }

// SlotPollMin and SlotPollMax bound how long a job whose group's slots
// are full in Slots waits before it asks again: SlotPollMin after the
// first refusal, doubling up to SlotPollMax. A Release in the same
// process wakes it at once.
const (
	SlotPollMin = 20 * time.Millisecond
	SlotPollMax = 500 * time.Millisecond
)

// SlotPoll returns the wait before the polls-th look again at a group
// whose slots are full in Slots.
func SlotPoll(polls int) time.Duration {
	if polls >= 5 {
		return SlotPollMax
	}
	return min(SlotPollMin<<polls, SlotPollMax)
}

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
//
// With Slots, the slot of a limit with a max is taken from them
// (outside the lock), then the rate; refused (next is SlotPoll away), or
// failed (RemoteRetry away), nothing is taken; a slot taken whose rate
// refuses is given back.
func (l *Limiter) Try(ctx context.Context, sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}) {
	return l.tryPolled(ctx, sel, 0)
}

// tryPolled is Try for the polls-th look at sel since a caller began to
// wait: a group whose fleet-wide slots are full is looked at again after
// SlotPoll(polls).
func (l *Limiter) tryPolled(ctx context.Context, sel redrive.SelectedLimit, polls int) (ok bool, next time.Time, freed <-chan struct{}) {
	if l.slots == nil || sel.Max == 0 {
		return l.tryLocal(ctx, sel)
	}
	k := groupKey{sel.Name, sel.Group}
	l.mu.Lock()
	g := l.groupLocked(k)
	// Kept (g stays the group's) until the token is in g.tokens, or
	// given back.
	g.taking++
	freed = g.freed
	l.mu.Unlock()
	token, err := l.slots.Take(ctx, sel)
	if err == nil && token != 0 {
		rest := sel
		rest.Max = 0 // the slot is the store's: the rate is what is left
		if ok, next, _ = l.tryLocal(ctx, rest); !ok {
			l.slots.Release(token)
		}
	} else {
		next = l.now().Add(SlotPoll(polls))
		if err != nil {
			next = l.now().Add(RemoteRetry)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g.taking--
	if ok {
		g.tokens = append(g.tokens, token)
		return true, time.Time{}, nil
	}
	if g.idle(l.now()) {
		delete(l.groups, k)
	}
	return false, next, freed
}

// tryLocal is Try with the slots in the process.
func (l *Limiter) tryLocal(ctx context.Context, sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}) {
	if l.remote == nil || sel.Rate.IsZero() {
		return l.try(sel)
	}
	local := sel
	local.Rate = store.LimitRate{}
	ok, _, freed, refusals := l.tryCounted(local)
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
	// The slot goes back, but not through Release: a start that never
	// was frees nothing, and waking the group's waiters would have each
	// ask the Remote again at once, and wake the others in turn, until
	// the rate allows a start. Only those refused as full while the
	// slot was held here are woken: the slot they lacked is back.
	k := groupKey{sel.Name, sel.Group}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[k]
	g.running--
	c := l.countsLocked(sel.Name)
	c.running--
	c.throttled++
	if g.fullRefusals != refusals {
		close(g.freed)
		g.freed = make(chan struct{})
	}
	if g.idle(l.now()) {
		delete(l.groups, k)
		return false, next, nil // no slot lacks: wait for next
	}
	return false, next, g.freed
}

// try is Try with the limiter's own GCRA.
func (l *Limiter) try(sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}) {
	ok, next, freed, _ = l.tryCounted(sel)
	return ok, next, freed
}

// tryCounted is try that also returns, granted, the group's count of
// looks refused as full at the grant.
func (l *Limiter) tryCounted(sel redrive.SelectedLimit) (ok bool, next time.Time, freed <-chan struct{}, fullRefusals uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	g := l.groupLocked(groupKey{sel.Name, sel.Group})
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
		if full {
			g.fullRefusals++
		}
		return false, next, g.freed, 0
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
	return true, time.Time{}, nil, g.fullRefusals
}

// Release ends a job of sel's group that Try let start: its slot frees,
// and the callers waiting on the group try again.
//
// With Slots, a slot of the group the process holds from them (they are
// alike) is given back to them first, so that the waiters it wakes find
// it free there.
func (l *Limiter) Release(sel redrive.SelectedLimit) {
	k := groupKey{sel.Name, sel.Group}
	var token int64
	if l.slots != nil && sel.Max > 0 {
		// The slot goes back to the store first, so that the local
		// waiters, woken below, find it free there.
		l.mu.Lock()
		if g := l.groups[k]; g != nil && len(g.tokens) > 0 {
			token = g.tokens[len(g.tokens)-1]
			g.tokens = g.tokens[:len(g.tokens)-1]
		}
		l.mu.Unlock()
		if token != 0 {
			l.slots.Release(token)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[k]
	if g == nil || g.running == 0 {
		panic("limiter: Release without a start")
	}
	g.running--
	l.countsLocked(sel.Name).running--
	close(g.freed)
	g.freed = make(chan struct{})
	if g.idle(l.now()) {
		delete(l.groups, k)
	}
}

// groupLocked returns k's group, created if there is none.
func (l *Limiter) groupLocked(k groupKey) *group {
	g := l.groups[k]
	if g == nil {
		g = &group{freed: make(chan struct{})}
		l.groups[k] = g
	}
	return g
}

// idle reports whether g holds nothing at now: no running job, no take
// under way, a tat that is past (which says no more than no tat).
func (g *group) idle(now time.Time) bool {
	return g.running == 0 && g.taking == 0 && !g.tat.After(now)
}

// sweepLocked forgets the groups that hold nothing: no running job, and
// a tat that is past (which says no more than no tat).
func (l *Limiter) sweepLocked(now time.Time) {
	for k, g := range l.groups {
		if g.idle(now) {
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
	polls := 0
	for {
		release := func() {}
		if slot != nil {
			r, ok := slot()
			if !ok {
				return Stopped, nil
			}
			release = r
		}
		ok, next, freed := l.tryPolled(ctx, sel, polls)
		polls++
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

// slotTimeout bounds one call of a store's slot methods.
const slotTimeout = 10 * time.Second

// StoreSlots are Slots held in a store (store.Limits.TakeLimitSlot), for
// every process on it: each slot is a lease, renewed while its job runs
// by one batched RenewLimitSlots every third of the lease, so that the
// slots of a process that dies come back when their leases end. It is
// safe for concurrent use.
type StoreSlots struct {
	st     store.Limits
	holder string
	lease  time.Duration
	log    *slog.Logger
	now    func() time.Time

	mu   sync.Mutex
	held map[int64]struct{}
	// stop, while a renewer runs, is its own: closed (and set to nil)
	// once the process holds no slot, which ends it.
	stop chan struct{}
	// renewed is closed, and replaced, after each round of renewals
	// (for tests).
	renewed chan struct{}
	lost    int64
}

// DefaultSlotLease is the lease of a StoreSlots slot by default.
const DefaultSlotLease = 30 * time.Second

// NewStoreSlots returns Slots held in st by holder (a name for the
// process, shown to the operator), each leased for lease (DefaultSlotLease
// when not positive). Failures are logged to log.
func NewStoreSlots(st store.Limits, holder string, lease time.Duration, log *slog.Logger) *StoreSlots {
	if lease <= 0 {
		lease = DefaultSlotLease
	}
	if log == nil {
		log = slog.Default()
	}
	return &StoreSlots{st: st, holder: holder, lease: lease, log: log, now: time.Now,
		held: map[int64]struct{}{}, renewed: make(chan struct{})}
}

// Take implements Slots: one TakeLimitSlot, leased until now + lease.
func (s *StoreSlots) Take(ctx context.Context, sel redrive.SelectedLimit) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, slotTimeout)
	defer cancel()
	now := s.now()
	token, err := s.st.TakeLimitSlot(cctx, sel.Name, sel.Group, sel.Max, s.holder, now, now.Add(s.lease))
	if err != nil {
		if ctx.Err() == nil { // not the consumer's shutdown
			s.log.Warn("limits: the store's slots cannot be read; limited jobs wait", "limit", sel.Name, "error", err)
		}
		return 0, fmt.Errorf("limiter: take a slot of %q: %w", sel.Name, err)
	}
	if token == 0 {
		return 0, nil
	}
	s.mu.Lock()
	s.held[token] = struct{}{}
	if s.stop == nil {
		s.stop = make(chan struct{})
		go s.renew(s.stop)
	}
	s.mu.Unlock()
	return token, nil
}

// Release implements Slots: one ReleaseLimitSlot. A failed one is
// logged; the slot's lease, no longer renewed, then ends by itself.
func (s *StoreSlots) Release(token int64) {
	s.mu.Lock()
	delete(s.held, token)
	s.stopIdleLocked()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	if _, err := s.st.ReleaseLimitSlot(ctx, token, s.now()); err != nil {
		s.log.Warn("limits: a slot cannot be given back to the store; it frees when its lease ends",
			"token", token, "lease", s.lease, "error", err)
	}
}

// Lost returns how many slots the process lost: slots whose lease
// ended before a renewal reached the store (the store unreachable, or
// the process stalled, for a lease), which another process may hold
// since. Their jobs ran on.
func (s *StoreSlots) Lost() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Held returns how many slots the process holds.
func (s *StoreSlots) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// stopIdleLocked ends the renewer once the process holds no slot.
func (s *StoreSlots) stopIdleLocked() {
	if len(s.held) == 0 && s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
}

// renew renews the held slots' leases every third of a lease, in
// batches, until stop is closed (the process holds none).
func (s *StoreSlots) renew(stop chan struct{}) {
	t := time.NewTimer(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.stop != stop {
			s.mu.Unlock()
			return
		}
		tokens := make([]int64, 0, len(s.held))
		for tok := range s.held {
			tokens = append(tokens, tok)
		}
		s.mu.Unlock()
		for batch := range slices.Chunk(tokens, store.MaxSlotTokens) {
			s.renewBatch(batch)
		}
		s.mu.Lock()
		close(s.renewed)
		s.renewed = make(chan struct{})
		s.mu.Unlock()
		t.Reset(s.lease / 3)
	}
}

func (s *StoreSlots) renewBatch(tokens []int64) {
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	now := s.now()
	lost, err := s.st.RenewLimitSlots(ctx, tokens, now, now.Add(s.lease))
	if err != nil {
		s.log.Warn("limits: the leases of the slots held cannot be renewed; they end unless a later renewal succeeds",
			"slots", len(tokens), "lease", s.lease, "error", err)
		return
	}
	if len(lost) == 0 {
		return
	}
	s.mu.Lock()
	n := 0
	for _, tok := range lost {
		if _, ok := s.held[tok]; ok { // not released meanwhile
			delete(s.held, tok)
			n++
		}
	}
	s.lost += int64(n)
	s.stopIdleLocked()
	s.mu.Unlock()
	if n > 0 {
		s.log.Warn("limits: slots lost: their leases ended before they were renewed; their jobs run on, beyond the fleet's max",
			"slots", n, "lease", s.lease)
	}
}
