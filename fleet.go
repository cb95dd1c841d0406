package redrive

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// Breaker sharing: a running Worker connects the breakers of its registry to
// the store (store.Breakers), so that every process on the store trips,
// probes and closes a dependency's breaker together. The breakers call the
// store only on their slow paths (a failure while closed, the end of a
// break, a probe's outcome); successes on a closed breaker never leave the
// process. State changes reach the other processes through the store's
// notifications (PostgreSQL) and a poll of the store's breakers: every
// fleetPoll (SQLite), every fleetSafetyPoll with notifications. A process
// that cannot reach the store lets each breaker decide alone, says so once,
// and shares again when the store answers.

var (
	// fleetPoll is how often a process reads the shared breakers of a
	// store that does not notify (SQLite): the bound on how late it learns
	// another process's trip or close.
	fleetPoll = 500 * time.Millisecond
	// fleetSafetyPoll is how often a process on a notifying store reads
	// them anyway, in case a notification was lost.
	fleetSafetyPoll = 5 * time.Second
	// fleetRejoinPoll is how often a process that lost the store tries it
	// again.
	fleetRejoinPoll = time.Second
	// fleetTimeout bounds each store call a breaker makes.
	fleetTimeout = 2 * time.Second
)

// errFleetOffline is what the shared layer answers while the store is out of
// reach: the breaker decides alone.
var errFleetOffline = errors.New("redrive: breakers: the store is out of reach; deciding locally")

// fleetBreakers implements breaker.Shared on a store.
type fleetBreakers struct {
	st      store.Store
	reg     *breaker.Registry
	process string
	log     *slog.Logger
	ctx     context.Context // ends with the worker

	offline   atomic.Bool
	listening atomic.Bool // the store's notifications arrive
	mu        sync.Mutex  // serializes sync
	joined    bool        // under mu: the first sync handed local trips over
	wake      chan struct{}
	// signal, when a test set it, is sent on after each sync of run.
	signal testSignal
}

var _ breaker.Shared = (*fleetBreakers)(nil)

func newFleetBreakers(ctx context.Context, st store.Store, reg *breaker.Registry, process string, log *slog.Logger) *fleetBreakers {
	return &fleetBreakers{st: st, reg: reg, process: process, log: log, ctx: ctx, wake: make(chan struct{}, 1)}
}

// run connects the registry, keeps it in step with the store until ctx
// ends, then disconnects it.
func (f *fleetBreakers) run(ctx context.Context) {
	f.reg.Share(f)
	defer f.reg.Share(nil)
	f.sync(ctx)
	f.signal.send()
	var listener sync.WaitGroup
	defer listener.Wait()
	if n, ok := f.st.(store.BreakerNotifier); ok {
		f.listening.Store(true)
		listener.Go(func() {
			err := n.ListenBreakers(ctx, func(string) { f.poke() })
			f.listening.Store(false)
			if err != nil && ctx.Err() == nil {
				f.log.Warn("breakers: listening for shared breaker changes stopped; polling the store instead", "error", err, "poll_interval", fleetPoll)
				f.poke()
			}
		})
	}
	t := time.NewTimer(fleetPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-t.C:
		}
		f.sync(ctx)
		f.signal.send()
		next := fleetPoll
		if f.listening.Load() {
			next = fleetSafetyPoll
		}
		if f.offline.Load() {
			next = min(next, fleetRejoinPoll)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// poke asks the loop for a sync, without blocking.
func (f *fleetBreakers) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// sync reads every shared breaker and applies it to the local one. After
// the store was out of reach (or at start), it first hands the store the
// breakers this process opened alone.
func (f *fleetBreakers) sync(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	list, err := f.list(ctx)
	if err != nil {
		f.lost(err)
		return
	}
	if f.offline.Load() || !f.joined {
		if f.pushLocal(ctx, list) {
			if list, err = f.list(ctx); err != nil {
				f.lost(err)
				return
			}
		}
		if f.offline.CompareAndSwap(true, false) {
			f.log.Info("breakers: the store is back; sharing breaker state with the fleet again", "process", f.process)
		}
		f.joined = true
	}
	for _, s := range list {
		f.reg.Get(s.Name).Apply(f.fleetOf(s))
	}
}

func (f *fleetBreakers) list(ctx context.Context) ([]store.BreakerState, error) {
	ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	return f.st.ListBreakers(ctx)
}

// pushLocal reports, as trips, the local breakers that opened on their
// own (tripped by this process's calls, not by applying the fleet's
// state) while the fleet's is not open, and reports whether it reported
// any.
func (f *fleetBreakers) pushLocal(ctx context.Context, list []store.BreakerState) bool {
	fleet := make(map[string]string, len(list))
	for _, s := range list {
		fleet[s.Name] = s.State
	}
	pushed := false
	for _, b := range f.reg.Breakers() {
		st := b.Status()
		// A breaker open by the fleet's state is not this process's to
		// hand over: the fleet may have closed or deleted it meanwhile.
		if st.State != breaker.Open || fleet[b.Name()] == store.BreakerOpen || b.OpenedByFleet() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		_, err := f.st.ReportBreaker(cctx, store.BreakerReport{Name: b.Name(), Process: f.process, Now: time.Now(),
			Failures: st.Failures, Requests: st.Requests, Tripped: true, ReadyAt: st.ReadyAt, Rule: ruleOf(b.Settings())})
		cancel()
		if err != nil {
			f.log.Warn("breakers: could not share a breaker opened by this process", "breaker", b.Name(), "error", err)
			continue
		}
		pushed = true
	}
	return pushed
}

// lost records that the store is out of reach, logging it once.
func (f *fleetBreakers) lost(err error) {
	if f.ctx.Err() != nil || errors.Is(err, store.ErrInvalid) {
		return
	}
	if f.offline.CompareAndSwap(false, true) {
		f.log.Warn("breakers: the store is out of reach; each breaker decides alone on this process's calls until it is back",
			"process", f.process, "error", err)
		f.poke()
	}
}

// fleetOf converts a shared record to what a breaker applies.
func (f *fleetBreakers) fleetOf(s store.BreakerState) breaker.Fleet {
	fl := breaker.Fleet{OpenedAt: s.OpenedAt, OpenedBy: s.OpenedBy, Version: s.Version}
	switch s.State {
	case store.BreakerOpen:
		fl.State, fl.ReadyAt = breaker.Open, s.ReadyAt
	case store.BreakerHalfOpen:
		fl.State, fl.ReadyAt, fl.Prober = breaker.HalfOpen, s.ProbeUntil, s.ProbeBy == f.process
	default:
		fl.State = breaker.Closed
	}
	return fl
}

// ruleOf is a breaker's trip rule as the store applies it to the fleet's
// counts.
func ruleOf(c breaker.Config) store.BreakerRule {
	r := store.BreakerRule{Failures: c.Failures, Window: c.Window, BreakDuration: c.BreakDuration}
	if !c.CountOnly {
		r.Ratio, r.MinRequests = c.FailureRatio, c.MinRequests
		if c.Consecutive > 0 {
			r.Consecutive = c.Consecutive
		}
	}
	return r
}

// call runs a store call for a breaker: not at all while the store is out
// of reach, within fleetTimeout otherwise.
func (f *fleetBreakers) call(fn func(ctx context.Context) (store.BreakerState, error)) (breaker.Fleet, error) {
	if f.offline.Load() {
		return breaker.Fleet{}, errFleetOffline
	}
	ctx, cancel := context.WithTimeout(f.ctx, fleetTimeout)
	defer cancel()
	s, err := fn(ctx)
	if err != nil {
		f.lost(err)
		return breaker.Fleet{}, err
	}
	return f.fleetOf(s), nil
}

// Failed implements breaker.Shared. The fleet's counts decide: while the
// store is within reach a breaker does not trip on its own counts (with a
// ratio, the other processes' successes may outweigh this one's failures).
// Only while the store was out of reach does a local trip happen, and it
// becomes the fleet's when the store is back (pushLocal).
func (f *fleetBreakers) Failed(name string, r breaker.Report) (breaker.Fleet, error) {
	b, ok := f.reg.Lookup(name)
	if !ok {
		return breaker.Fleet{}, errors.New("redrive: breakers: unknown breaker " + name)
	}
	return f.call(func(ctx context.Context) (store.BreakerState, error) {
		return f.st.ReportBreaker(ctx, store.BreakerReport{Name: name, Process: f.process, Now: r.Now,
			Failures: r.Failures, Requests: r.Requests, Streak: r.Streak, Tripped: r.Tripped, Rule: ruleOf(b.Settings())})
	})
}

// Succeeded implements breaker.Shared: the process's run of failures in a
// row broke, and its counts replace those it reported.
func (f *fleetBreakers) Succeeded(name string, r breaker.Report) (breaker.Fleet, error) {
	return f.Failed(name, r)
}

// Probe implements breaker.Shared.
func (f *fleetBreakers) Probe(name string, now, until time.Time) (breaker.Fleet, bool, error) {
	granted := false
	fl, err := f.call(func(ctx context.Context) (store.BreakerState, error) {
		s, g, err := f.st.ClaimBreakerProbe(ctx, store.BreakerClaim{Name: name, Process: f.process, Now: now, Until: until})
		granted = g
		return s, err
	})
	return fl, granted, err
}

// Probed implements breaker.Shared.
func (f *fleetBreakers) Probed(name string, ok bool, now, readyAt time.Time) (breaker.Fleet, error) {
	return f.call(func(ctx context.Context) (store.BreakerState, error) {
		return f.st.SettleBreakerProbe(ctx, store.BreakerSettle{Name: name, Process: f.process, Now: now, OK: ok, ReadyAt: readyAt})
	})
}

// Fallback implements breaker.Shared.
func (f *fleetBreakers) Fallback() bool { return f.offline.Load() }
