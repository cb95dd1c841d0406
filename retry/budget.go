package retry

import (
	"math"
	"sync"
	"time"
)

// Budget defaults, used for zero (or negative) BudgetConfig fields.
const (
	DefaultBudgetRatio      = 0.2
	DefaultBudgetMinRetries = 100
	DefaultBudgetWindow     = 10 * time.Second
)

// budgetBuckets is the number of buckets the sliding window is made of.
const budgetBuckets = 10

// BudgetConfig configures a [Budget]. Zero fields take the defaults.
type BudgetConfig struct {
	// Ratio is the share of recent attempts that may be retries: 0.2 lets
	// retries reach 20% of the attempts started in the window. Default 0.2.
	Ratio float64
	// MinRetries is a floor: this many retries per Window are always
	// allowed, so that the delays a policy promises hold under ordinary
	// bursts of failures and only a retry storm beyond it is spread out.
	// Default 100.
	MinRetries int
	// Window is the length of the sliding window over which attempts and
	// retries are counted. Default 10s.
	Window time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake one. It must
	// be safe for concurrent use if the Budget is used concurrently.
	Now func() time.Time
}

// Budget keeps the retries of a queue within a share of its recent attempts,
// so that a failing dependency does not turn into a retry storm.
//
// Call [Budget.Attempt] whenever an attempt starts (first runs and retries
// alike) and pass every retry delay through [Budget.Retry]. Within budget the
// delay is unchanged. Over budget the retry is not dropped: it waits for the
// next free slot, the slots being Window/allowed apart, and then for its own
// delay, so that excess retries run at the budget's rate.
//
// A retry counts in the window where it is scheduled, pushed out or not,
// and not again where its slot falls: retries within budget do not queue
// behind the pushed-out backlog, so over any window of whole buckets at
// most allowed retries pass unchanged and at most allowed+1 pushed-out
// ones reach their slots. Right after a burst, while its backlog lasts,
// retries can start at up to twice the budget's rate; that is the price of
// keeping new failures' delays as their policy says (see docs/design.md,
// "Retry budget").
//
// Counts are kept in a ring of buckets, so the window slides in steps of
// Window/10: a span of Window that straddles bucket edges may see up to
// 2*allowed retries pass unchanged. A Budget is safe for concurrent use.
// Create one with [NewBudget]; a nil *Budget allows every retry unchanged.
type Budget struct {
	ratio      float64
	minRetries int
	window     time.Duration
	width      time.Duration // of one bucket
	now        func() time.Time
	start      time.Time // offsets below are measured from here

	mu       sync.Mutex
	last     time.Duration // latest offset seen: the clock never goes back
	lastSlot time.Duration // offset of the last slot given to an excess retry
	buckets  [budgetBuckets]budgetBucket
}

type budgetBucket struct {
	epoch                       int64 // which Window/10 period the counts are for
	attempts, retries, deferred int
}

// BudgetStatus is a snapshot of a [Budget], for metrics and the dashboard.
type BudgetStatus struct {
	// Attempts is the number of attempts started in the window.
	Attempts int
	// Retries is the number of retries scheduled in the window, pushed out
	// or not.
	Retries int
	// Deferred is how many of those Retries were over budget and pushed out.
	Deferred int
	// Allowed is the number of retries the window allows:
	// max(MinRetries, Ratio*Attempts).
	Allowed int
	// Over reports whether the budget is used up: the next retry will be
	// pushed out.
	Over bool
	// Backlog is how far ahead of now the last slot given to a pushed-out
	// retry lies; zero when no pushed-out retry is waiting for its slot.
	Backlog time.Duration
}

// NewBudget returns a Budget configured by cfg, with defaults for its zero
// fields (Ratio 0.2, MinRetries 100, Window 10s, Now time.Now).
func NewBudget(cfg BudgetConfig) *Budget {
	b := &Budget{
		ratio:      cfg.Ratio,
		minRetries: cfg.MinRetries,
		window:     cfg.Window,
		now:        cfg.Now,
	}
	if !(b.ratio > 0) || math.IsInf(b.ratio, 0) {
		b.ratio = DefaultBudgetRatio
	}
	if b.minRetries <= 0 {
		b.minRetries = DefaultBudgetMinRetries
	}
	if b.window <= 0 {
		b.window = DefaultBudgetWindow
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.width = max(b.window/budgetBuckets, 1)
	b.start = b.now()
	return b
}

// Attempt records that an attempt started.
func (b *Budget) Attempt() {
	if b == nil {
		return
	}
	t := b.now()
	b.mu.Lock()
	_, cur := b.current(t)
	cur.attempts++
	b.mu.Unlock()
}

// Retry records that a retry is being scheduled with the given delay and
// returns the delay to use instead. Within budget that is delay itself.
// Over budget the retry takes the next free slot (slots are Window/allowed
// apart, the first one interval after now) and its delay becomes the wait
// for that slot plus delay, so that a burst of excess retries comes back
// spread out, in order, none dropped. A negative delay counts as 0.
func (b *Budget) Retry(delay time.Duration) time.Duration {
	delay = max(delay, 0)
	if b == nil {
		return delay
	}
	t := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	off, cur := b.current(t)
	attempts, retries, _ := b.sum()
	allowed := b.allowed(attempts)
	cur.retries++
	if retries < allowed {
		return delay
	}
	cur.deferred++
	interval := max(b.window/time.Duration(allowed), 1)
	b.lastSlot = satAdd(max(b.lastSlot, off), interval)
	return satAdd(delay, b.lastSlot-off)
}

// Snapshot returns the budget's current counts.
func (b *Budget) Snapshot() BudgetStatus {
	if b == nil {
		return BudgetStatus{}
	}
	t := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	off, _ := b.current(t)
	attempts, retries, deferred := b.sum()
	allowed := b.allowed(attempts)
	return BudgetStatus{
		Attempts: attempts,
		Retries:  retries,
		Deferred: deferred,
		Allowed:  allowed,
		Over:     retries >= allowed,
		Backlog:  max(b.lastSlot-off, 0),
	}
}

// current advances the budget's time to t and returns the offset from start
// and the bucket for it, emptied if it last held an older period. The clock
// is read before taking the lock, so t may be slightly behind a time another
// goroutine already recorded: time never goes back here. b.mu must be held.
func (b *Budget) current(t time.Time) (time.Duration, *budgetBucket) {
	off := max(t.Sub(b.start), b.last)
	b.last = off
	epoch := int64(off / b.width)
	cur := &b.buckets[epoch%budgetBuckets]
	if cur.epoch != epoch {
		*cur = budgetBucket{epoch: epoch}
	}
	return off, cur
}

// sum adds up the buckets still inside the window. b.mu must be held and
// current called first.
func (b *Budget) sum() (attempts, retries, deferred int) {
	now := int64(b.last / b.width)
	for i := range b.buckets {
		k := &b.buckets[i]
		if now-k.epoch < budgetBuckets {
			attempts += k.attempts
			retries += k.retries
			deferred += k.deferred
		}
	}
	return attempts, retries, deferred
}

// allowed is the number of retries a window with this many attempts allows.
func (b *Budget) allowed(attempts int) int {
	x := b.ratio * float64(attempts)
	if x >= 1<<62 { // absurd ratios: keep the conversion defined
		return 1 << 62
	}
	return max(b.minRetries, int(x))
}
