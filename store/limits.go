package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Concurrency limits: at most Max jobs running at once, fleet-wide, in
// each group of a limit. A job is put under a limit when it is enqueued
// (NewJob.Limit); its group is the limit's name and the job's key
// (NewJob.LimitKey: a customer id, a host; empty for a limit per queue or
// per kind). A slot is a job in the running state: a store counts, in the
// transaction that leases jobs, the running jobs of each group, and
// leases a limited job only while its group has fewer than Max. A slot is
// therefore held by exactly one lease of one job, and freed by whatever
// ends that lease (an outcome, a rescue of the expired lease): the count
// is read from the jobs themselves, never kept beside them, so it cannot
// drift. A job whose group is full is not leased: it waits, due, without
// using an attempt, and is leased, in due-time order within its group, by
// a later fetch once a slot is free.

// Rate limits: a limit may also have a rate (LimitRate), alone or with
// its Max: at most N starts per Per in each group, in bursts of up to
// Burst. The rate is a GCRA (generic cell rate algorithm): each group
// keeps one timestamp, its theoretical arrival time (TAT), in the store.
// A start at t is allowed when t >= TAT - (Burst-1)*T, where T = Per/N
// (the emission interval, rounded up to the microsecond, so a limit never
// exceeds its rate); it moves TAT to max(TAT, t) + T. Over any window of
// length d a group therefore starts at most Burst + d/T jobs. The fetch
// that leases a group's jobs reads and moves its TAT in its own
// transaction (fenced as the slots are), so every process shares one
// rate. A job its rate holds waits, due, without using an attempt, and
// is leased by the first fetch at or after the rate allows it, in its
// group's priority then due-time order. Its start time is the fetch's
// clock read once the fetch holds its lock (FetchParams.Clock, else
// Now), never earlier: a rate-limited job is not leased ahead of its due
// time (FetchParams.DueBy does not apply to it).

// The bounds of a LimitRate.
const (
	// MaxRateN bounds LimitRate.N.
	MaxRateN = 1_000_000
	// MinRatePer and MaxRatePer bound LimitRate.Per.
	MinRatePer = time.Millisecond
	MaxRatePer = 24 * time.Hour
	// MaxBurst bounds LimitRate.Burst.
	MaxBurst = 1_000_000
)

// LimitRate is the rate of a limit: at most N job starts per Per in each
// group, in bursts of up to Burst. The zero LimitRate is no rate.
type LimitRate struct {
	N     int
	Per   time.Duration
	Burst int
}

// IsZero reports whether r is no rate.
func (r LimitRate) IsZero() bool { return r == LimitRate{} }

// Interval returns the emission interval: Per/N rounded up to the
// microsecond, the time between two starts of a group at the full rate.
func (r LimitRate) Interval() time.Duration {
	per := r.Per.Microseconds()
	return time.Duration((per+int64(r.N)-1)/int64(r.N)) * time.Microsecond
}

// String returns the rate as "N/Per" ("50/1s"), with the burst when it
// is not 1 ("50/1s burst 10"); "" for no rate.
func (r LimitRate) String() string {
	if r.IsZero() {
		return ""
	}
	s := fmt.Sprintf("%d/%s", r.N, r.Per)
	if r.Burst != 1 {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	return s
}

// CheckLimitRate reports, as an ErrInvalid error naming the field at
// fault (rate, interval or burst), a rate no store keeps: N out of [1,
// MaxRateN], Per out of [MinRatePer, MaxRatePer] or not whole
// microseconds, more than one start per microsecond, Burst out of [1,
// MaxBurst]. The zero LimitRate (no rate) is fine.
func CheckLimitRate(r LimitRate) error {
	if r.IsZero() {
		return nil
	}
	switch {
	case r.N < 1 || r.N > MaxRateN:
		return fmt.Errorf("%w: rate: %d jobs per interval is out of range [1, %d]", ErrInvalid, r.N, MaxRateN)
	case r.Per < MinRatePer || r.Per > MaxRatePer:
		return fmt.Errorf("%w: interval: %s is out of range [%s, %s]", ErrInvalid, r.Per, MinRatePer, MaxRatePer)
	case r.Per%time.Microsecond != 0:
		return fmt.Errorf("%w: interval: %s is not a whole number of microseconds", ErrInvalid, r.Per)
	case int64(r.N) > r.Per.Microseconds():
		return fmt.Errorf("%w: rate: %d per %s is more than one start a microsecond", ErrInvalid, r.N, r.Per)
	case r.Burst < 1 || r.Burst > MaxBurst:
		return fmt.Errorf("%w: burst: %d is out of range [1, %d]", ErrInvalid, r.Burst, MaxBurst)
	}
	return nil
}

// MarshalJSON writes the rate as {"n", "per" (a Go duration), "per_ms",
// "burst", "text"}.
func (r LimitRate) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitRateJSON{N: r.N, Per: r.Per.String(), PerMS: float64(r.Per) / float64(time.Millisecond), Burst: r.Burst, Text: r.String()})
}

// UnmarshalJSON reads what MarshalJSON writes (n, per and burst; the
// others are ignored).
func (r *LimitRate) UnmarshalJSON(b []byte) error {
	var v limitRateJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	per, err := time.ParseDuration(v.Per)
	if err != nil && v.Per != "" {
		return fmt.Errorf("rate: per: %w", err)
	}
	*r = LimitRate{N: v.N, Per: per, Burst: v.Burst}
	return nil
}

type limitRateJSON struct {
	N     int     `json:"n"`
	Per   string  `json:"per"`
	PerMS float64 `json:"per_ms"`
	Burst int     `json:"burst"`
	Text  string  `json:"text,omitempty"`
}

// MaxLimit bounds a limit's Max.
const MaxLimit = 1_000_000

// MaxLimitName bounds, in bytes, a limit's name and a job's limit key.
const MaxLimitName = 200

// Limits is the part of a Store that keeps concurrency limits.
type Limits interface {
	// SetLimit sets the limit named name to max running jobs per group,
	// creating it if there is none (without a rate), and returns its
	// state. It keeps the limit's rate. It takes
	// effect at the next fetch: lowering it below the running count
	// stops new starts until enough jobs end; no running job is stopped.
	// Max 0 removes the cap of a limit that has a rate (its jobs are then
	// held by the rate alone). A bad name, a max out of [1, MaxLimit],
	// or 0 for a limit without a rate (ErrNoCapNoRate) is ErrInvalid,
	// and nothing is stored.
	SetLimit(ctx context.Context, name string, max int, now time.Time) (LimitState, error)

	// ListLimits returns every limit, sorted by name, with its use now.
	ListLimits(ctx context.Context, now time.Time) ([]LimitState, error)

	// SetLimitRate sets the rate of the limit named name (the zero
	// LimitRate removes it), creating the limit if there is none (with no
	// cap on running jobs: Max 0), and returns its state. Burst 0 keeps
	// the limit's burst (1 when it has no rate yet). It keeps the
	// limit's max and takes effect at the next fetch: each group's rate
	// state is brought under the new rate as if the group had just used
	// its whole burst at it (its TAT no later than now + Burst·T), so
	// raising a rate frees a group held by the old one within one new
	// interval, and lowering one holds a group that used its burst one
	// new interval, not the old burst's. A bad name or rate
	// (CheckLimitRate, but Burst 0), or removing the rate of a limit
	// without a max (ErrNoCapNoRate), is ErrInvalid, and nothing is
	// stored.
	SetLimitRate(ctx context.Context, name string, r LimitRate, now time.Time) (LimitState, error)

	// SetLimitHold turns on or off the hold on Retry-After of the limit
	// named name (see LimitState.HoldOnRetryAfter) and returns its
	// state. Turning it off also ends the limit's holds now. It takes
	// effect at the next fetch. A limit the store does not keep is
	// ErrNotFound.
	SetLimitHold(ctx context.Context, name string, on bool, now time.Time) (LimitState, error)

	// TakeLimitStarts takes, fleet-wide, up to n starts of the group key
	// of the limit named name under its rate, in one transaction, at the
	// time clock reads once the transaction holds what serializes the
	// limited fetches (SQLite: the writer; PostgreSQL: their advisory
	// lock), so that a start counts when it is taken, not when it was
	// asked for: for code that starts jobs of a limit outside the
	// store's fetch (the broker transports' consumers). The rate is the
	// limit's stored one when the store keeps the limit with a rate (a
	// rate set at run time wins, as over an enqueue's), else r; the
	// group's rate state (its TAT) is the one the store's limited fetches
	// move, so the starts of both count against one rate, and the starts
	// follow LimitRate.Take; while a Retry-After holds the group (its
	// held_until, set by a limited job's outcome with Outcome.HoldUntil,
	// is later than the clock) it takes none, and next is not before the
	// hold's end (LimitRate.TakeHeld). It creates no limit. It returns how many
	// starts it took (0 to n) and, when fewer than n, when the next may
	// be taken. A bad name or key, n out of [1, MaxRateN], or a bad r is
	// ErrInvalid, and nothing is taken.
	TakeLimitStarts(ctx context.Context, name, key string, r LimitRate, n int, clock func() time.Time) (took int, next time.Time, err error)

	// ChangeLimit applies every change ch gives (its max, its rate, its
	// hold on Retry-After) to the limit named name in one transaction,
	// and returns its state: either all of them take effect or none. Each
	// change is what SetLimit, SetLimitRate and SetLimitHold make, and
	// the checks are on the limit as it would be after all of them (so a
	// max 0 and a new rate go together, in any order): a bad name, max or
	// rate, no change, or a limit left with neither a max nor a rate
	// (ErrNoCapNoRate) is ErrInvalid; a hold alone on a limit the store
	// does not keep is ErrNotFound; and nothing is stored.
	ChangeLimit(ctx context.Context, name string, ch LimitChange, now time.Time) (LimitState, error)

	// TakeLimitSlot takes, fleet-wide, a slot of the group key of the
	// limit named name for holder (a name for whoever holds it, kept for
	// the operator), leased until until: for code that runs jobs of a
	// limit outside the store's fetch (the broker transports'
	// consumers). The group's slots are those taken here whose lease has
	// not ended at now (they are counted apart from the store's running
	// jobs). It takes one when fewer than the group's max are held: the
	// limit's stored max when the store keeps the limit with one (a max
	// set at run time wins), else max. It returns the slot's token, which
	// names this holding and no other (a token is never given twice),
	// or 0 when the group is full. Two takes never count a group's slots
	// at once, so at no time are more than its max held. A bad name or
	// key, a max out of [1, MaxLimit], an empty or too long holder or an
	// until not after now is ErrInvalid, and nothing is taken. It creates
	// no limit.
	TakeLimitSlot(ctx context.Context, name, key string, max int, holder string, now, until time.Time) (token int64, err error)

	// RenewLimitSlots extends the leases of the slots tokens name to
	// until, in one transaction, and returns the tokens it could not
	// extend: their lease ended at or before now (the slot may since be
	// someone else's; it stays lost), or they were released. An until
	// not after now, or more than MaxSlotTokens tokens, is ErrInvalid,
	// and nothing is renewed.
	RenewLimitSlots(ctx context.Context, tokens []int64, now, until time.Time) (lost []int64, err error)

	// ReleaseLimitSlot ends the holding token names and reports whether
	// it still held its slot at now (its lease had not ended). A holder
	// whose lease ended frees nothing: its slot was free already, and
	// may be someone else's, under another token, since.
	ReleaseLimitSlot(ctx context.Context, token int64, now time.Time) (bool, error)
}

// LimitChange is a change of a limit's settings (Limits.ChangeLimit): the
// fields that are not nil.
type LimitChange struct {
	// Max is the new max (0: no cap, for a limit with a rate).
	Max *int
	// Rate is the new rate (the zero LimitRate removes it; Burst 0
	// keeps the limit's burst, 1 when it has no rate yet).
	Rate *LimitRate
	// Hold turns the hold on Retry-After on or off (off also ends the
	// limit's holds now).
	Hold *bool
}

// LimitSettings are what a store keeps of a limit that a LimitChange
// changes. Rate.N 0 is no rate (its Burst is still the one a new rate
// without a burst keeps).
type LimitSettings struct {
	Max  int
	Rate LimitRate
	Hold bool
}

// CheckLimitChange reports, as an ErrInvalid error, a LimitChange no
// store applies whatever the limit: a bad name, no change, a max out of
// [1, MaxLimit] but 0, a bad rate (but Burst 0).
func CheckLimitChange(name string, ch LimitChange) error {
	if err := CheckLimitName("name", name); err != nil {
		return err
	}
	if ch.Max == nil && ch.Rate == nil && ch.Hold == nil {
		return fmt.Errorf("%w: no change: give a max, a rate or the hold", ErrInvalid)
	}
	if ch.Max != nil && *ch.Max != 0 {
		if err := CheckLimitMax(*ch.Max); err != nil {
			return err
		}
	}
	if ch.Rate != nil {
		r := *ch.Rate
		if !r.IsZero() && r.Burst == 0 {
			r.Burst = 1 // the limit's burst is kept
		}
		if err := CheckLimitRate(r); err != nil {
			return err
		}
	}
	return nil
}

// Apply returns the settings of a limit after ch, given its settings
// before (old; exists false when the store does not keep the limit):
// ErrNotFound for a hold alone on a limit not kept, ErrNoCapNoRate for a
// limit left with neither a max nor a rate. A new limit has no max, no
// rate and no hold but what ch gives. ch is checked (CheckLimitChange)
// beforehand.
func (ch LimitChange) Apply(exists bool, old LimitSettings) (LimitSettings, error) {
	if !exists {
		if ch.Max == nil && ch.Rate == nil {
			return LimitSettings{}, ErrNotFound
		}
		old = LimitSettings{}
	}
	s := old
	if ch.Max != nil {
		s.Max = *ch.Max
	}
	if ch.Rate != nil {
		s.Rate = *ch.Rate
		if !s.Rate.IsZero() && s.Rate.Burst == 0 {
			s.Rate.Burst = max(old.Rate.Burst, 1)
		}
	}
	if ch.Hold != nil {
		s.Hold = *ch.Hold
	}
	if s.Max == 0 && s.Rate.N == 0 {
		return LimitSettings{}, ErrNoCapNoRate
	}
	return s, nil
}

// ErrNoCapNoRate is the error, wrapping ErrInvalid, of a change that
// would leave a limit with neither a max nor a rate.
var ErrNoCapNoRate = fmt.Errorf("%w: a limit needs a max or a rate: it cannot lose both", ErrInvalid)

// MaxLimitHolds bounds LimitState.Holds.
const MaxLimitHolds = 20

// LimitHold is a group of a limit held by a Retry-After: no job of the
// group starts before Until.
type LimitHold struct {
	Key   string    `json:"key"`
	Until time.Time `json:"until"`
}

// Take is the GCRA of the rate for up to n starts at now of a group whose
// theoretical arrival time is tat (zero: none), in whole microseconds as
// the stores count them: with T = Interval() and τ = (Burst-1)·T, it
// allows floor((now + τ - max(tat, now)) / T) + 1 starts (none when
// negative), takes at most n of them, and moves tat to
// max(tat, now) + took·T. next is, when fewer than n were taken, the
// earliest time one more start is allowed: newTat - τ.
func (r LimitRate) Take(tat, now time.Time, n int) (took int, newTat, next time.Time) {
	t := r.Interval().Microseconds()
	tau := int64(max(r.Burst, 1)-1) * t
	at := now.UnixMicro()
	base := max(at, tat.UnixMicro())
	if tat.IsZero() {
		base = at
	}
	if allowed := at + tau - base; allowed >= 0 {
		took = int(min(allowed/t+1, int64(n)))
	}
	end := base + int64(took)*t
	newTat = time.UnixMicro(end)
	if took < n {
		next = time.UnixMicro(end - tau)
	}
	return took, newTat, next
}

// TakeHeld is Take for a group that a Retry-After holds until heldUntil
// (zero or not later than now: no hold): while the hold lasts it takes
// nothing, leaves tat as it is, and the next start is not before the
// hold's end (nor before the rate allows one: tat - τ).
func (r LimitRate) TakeHeld(tat, heldUntil, now time.Time, n int) (took int, newTat, next time.Time) {
	if !heldUntil.After(now) {
		return r.Take(tat, now, n)
	}
	next = heldUntil
	if !tat.IsZero() {
		tau := time.Duration(max(r.Burst, 1)-1) * r.Interval()
		if at := tat.Add(-tau); at.After(next) {
			next = at
		}
	}
	return 0, tat, next
}

// CheckTakeStarts reports, as an ErrInvalid error, the arguments of a
// TakeLimitStarts no store takes.
func CheckTakeStarts(name, key string, r LimitRate, n int) error {
	if err := CheckLimitName("name", name); err != nil {
		return err
	}
	if len(key) > MaxLimitName {
		return fmt.Errorf("%w: key: longer than %d bytes", ErrInvalid, MaxLimitName)
	}
	if n < 1 || n > MaxRateN {
		return fmt.Errorf("%w: n: %d starts is out of range [1, %d]", ErrInvalid, n, MaxRateN)
	}
	if r.IsZero() {
		return fmt.Errorf("%w: rate: none", ErrInvalid)
	}
	return CheckLimitRate(r)
}

// MaxSlotTokens bounds the tokens of one RenewLimitSlots.
const MaxSlotTokens = 10_000

// CheckTakeSlot reports, as an ErrInvalid error naming the field at
// fault, the arguments of a TakeLimitSlot no store takes.
func CheckTakeSlot(name, key string, max int, holder string, now, until time.Time) error {
	if err := CheckLimitName("name", name); err != nil {
		return err
	}
	if len(key) > MaxLimitName || !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		return fmt.Errorf("%w: key: longer than %d bytes, not UTF-8 or holds a NUL", ErrInvalid, MaxLimitName)
	}
	if err := CheckLimitMax(max); err != nil {
		return err
	}
	if err := CheckLimitName("holder", holder); err != nil {
		return err
	}
	if !until.After(now) {
		return fmt.Errorf("%w: until: %s is not after now, %s", ErrInvalid, until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return nil
}

// CheckRenewSlots reports, as an ErrInvalid error, the arguments of a
// RenewLimitSlots no store takes.
func CheckRenewSlots(tokens []int64, now, until time.Time) error {
	if len(tokens) > MaxSlotTokens {
		return fmt.Errorf("%w: tokens: %d is more than %d", ErrInvalid, len(tokens), MaxSlotTokens)
	}
	if !until.After(now) {
		return fmt.Errorf("%w: until: %s is not after now, %s", ErrInvalid, until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return nil
}

// LimitState is a concurrency limit and its use now.
type LimitState struct {
	Name string `json:"name"`
	// Max is how many jobs of one group may run at once; 0 for no cap (a
	// limit with only a rate).
	Max int `json:"max"`
	// Rate is the limit's rate; absent (zero) when it has none.
	Rate *LimitRate `json:"rate,omitempty"`
	// Throttled counts the starts the rate delayed: jobs leased after
	// their due time because the rate held their group then, since the
	// limit was created (store-wide).
	Throttled int64 `json:"throttled"`
	// InUse is how many of the limit's jobs run now, all groups together;
	// Busiest is the most running in one group (never above Max unless
	// Max was lowered while they ran); Groups is how many groups have a
	// running job.
	InUse   int64 `json:"in_use"`
	Busiest int64 `json:"busiest"`
	Groups  int64 `json:"groups"`
	// Waiting is how many of the limit's jobs are due now (pending, or
	// scheduled with run_at at or before now) and not running: those
	// waiting on a slot, and those no worker has fetched yet.
	Waiting int64 `json:"waiting"`
	// UpdatedAt is when the limit was created or last set (zero for a
	// configured limit the store does not keep yet).
	UpdatedAt time.Time `json:"updated_at"`
	// HoldOnRetryAfter is whether a rate_limited failure with a
	// Retry-After of one of the limit's jobs holds the job's group,
	// fleet-wide, until the Retry-After has passed (Outcome.HoldUntil).
	HoldOnRetryAfter bool `json:"hold_on_retry_after"`
	// HeldGroups is how many of the limit's groups a Retry-After holds
	// now; Holds are those of them whose hold ends last, MaxLimitHolds
	// at most.
	HeldGroups int64       `json:"held_groups"`
	Holds      []LimitHold `json:"holds,omitempty"`

	// The store does not keep what follows: the redrive Client fills it.
	//
	// Configured is true when the process answering is configured with
	// the limit (redrive's Client.SetLimits, serve's concurrency limits);
	// Queue, Kind and Key are then its selector there (empty: any, and
	// one group).
	Configured bool   `json:"configured,omitempty"`
	Queue      string `json:"queue,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Key        string `json:"key,omitempty"`
	// BusiestGroups are, when asked for, its groups with running jobs,
	// the busiest first (see LimitUse.LimitGroups).
	BusiestGroups []LimitGroup `json:"busiest_groups,omitempty"`
}

// CheckLimitName reports, as an ErrInvalid error naming field, a limit
// name that no store keeps: empty, longer than MaxLimitName bytes, not
// UTF-8 or holding a control character.
func CheckLimitName(field, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	case len(name) > MaxLimitName:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, MaxLimitName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: %s holds a control character", ErrInvalid, field)
	}
	return nil
}

// CheckLimitMax reports, as an ErrInvalid error, a limit's max out of
// [1, MaxLimit].
func CheckLimitMax(max int) error {
	if max < 1 || max > MaxLimit {
		return fmt.Errorf("%w: limit max %d is out of range [1, %d]", ErrInvalid, max, MaxLimit)
	}
	return nil
}

// CheckNewLimit reports, as an ErrInvalid error, the limit fields of a
// new job that no store keeps: a key, max or rate without a limit, a bad
// limit name or key, a max out of range (0 is allowed only with a rate),
// a bad rate. Stores call it from Enqueue.
func CheckNewLimit(nj *NewJob) error {
	if nj.Limit == "" {
		if nj.LimitKey != "" || nj.LimitMax != 0 || !nj.LimitRate.IsZero() {
			return fmt.Errorf("%w: limit key or max without a limit", ErrInvalid)
		}
		return nil
	}
	if err := CheckLimitName("limit", nj.Limit); err != nil {
		return err
	}
	if len(nj.LimitKey) > MaxLimitName || !utf8.ValidString(nj.LimitKey) || strings.ContainsRune(nj.LimitKey, 0) {
		return fmt.Errorf("%w: limit key is longer than %d bytes, not UTF-8 or holds a NUL", ErrInvalid, MaxLimitName)
	}
	if err := CheckLimitRate(nj.LimitRate); err != nil {
		return err
	}
	if nj.LimitMax == 0 && !nj.LimitRate.IsZero() {
		return nil
	}
	return CheckLimitMax(nj.LimitMax)
}

// LeaseNow returns the start time of the limited jobs a fetch leases:
// p.Clock() read now, once the store holds its lock, but never before
// p.Now.
func LeaseNow(p *FetchParams) time.Time {
	if p.Clock == nil {
		return p.Now
	}
	if t := p.Clock(); t.After(p.Now) {
		return t
	}
	return p.Now
}

// LimitedFirst returns how many of a fetch's selected limited jobs, whose
// priorities are limited (highest first), belong in its first limit of
// the queue's due jobs by priority, given the priorities (highest first)
// of the due unlimited jobs above the lowest of them: an unlimited job
// of a higher priority goes before a limited one, a limited one wins a
// tie. A store leases only those, and fills the rest with unlimited
// jobs, so that no limited job is leased ahead of an unlimited one of a
// higher priority.
func LimitedFirst(limited, unlimited []int, limit int) int {
	i, j := 0, 0
	for i+j < limit {
		switch {
		case i < len(limited) && (j >= len(unlimited) || limited[i] >= unlimited[j]):
			i++
		case j < len(unlimited):
			j++
		default:
			return i
		}
	}
	return i
}
