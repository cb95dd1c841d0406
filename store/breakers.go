package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/internal/shortdur"
)

// Breakers is the part of a Store that shares circuit breakers' state
// between the processes using the store: one record per dependency (see
// BreakerState), changed atomically by the calls below, so that a
// dependency's breaker trips, half-opens and closes for the whole fleet at
// once. Successful calls never reach the store: processes report failures
// (with their own counts), ask for the single half-open probe and report
// its outcome.
//
// The transitions themselves are the functions ApplyBreakerReport,
// ApplyBreakerClaim, ApplyBreakerSettle and ApplyBreakerSet, which every
// store runs on the record it holds locked (a transaction), so that the
// rules are the same everywhere.
type Breakers interface {
	// ReportBreaker records the counts of one process for a dependency
	// (creating the record, closed, if there is none) and trips the
	// fleet's breaker when the fleet's counts meet the rule or the process
	// tripped its own breaker (ApplyBreakerReport). It returns the record
	// as it is after the report.
	ReportBreaker(ctx context.Context, r BreakerReport) (BreakerState, error)

	// ClaimBreakerProbe asks for the fleet's single half-open probe
	// (ApplyBreakerClaim). granted is true for exactly one caller per
	// half-open period: the first to ask once the open period has ended,
	// or once the previous probe's lease expired. The record is returned
	// either way; a missing one is reported closed, not granted, and is not
	// created.
	ClaimBreakerProbe(ctx context.Context, c BreakerClaim) (st BreakerState, granted bool, err error)

	// SettleBreakerProbe reports the outcome of a probe granted by
	// ClaimBreakerProbe (ApplyBreakerSettle): success closes the fleet's
	// breaker, failure opens it again. A caller that no longer holds the
	// probe changes nothing. A missing record is reported closed.
	SettleBreakerProbe(ctx context.Context, s BreakerSettle) (BreakerState, error)

	// SetBreaker forces a dependency's breaker open or closed for the
	// fleet (an operator's decision, ApplyBreakerSet), creating the record
	// if there is none.
	SetBreaker(ctx context.Context, p BreakerSet) (BreakerState, error)

	// Breaker returns one dependency's record, or ErrNotFound.
	Breaker(ctx context.Context, name string) (BreakerState, error)

	// ListBreakers returns every record, sorted by name.
	ListBreakers(ctx context.Context) ([]BreakerState, error)

	// DeleteBreaker deletes a dependency's record if nothing uses it
	// (CheckBreakerDelete, on the record held locked): ErrNotFound when
	// there is none, a *BreakerInUseError when it is in use and d.Force
	// is false. It returns the record as it was. The store remembers, for the name, a
	// version floor above the deleted record's version: a missing record
	// reads as closed at the floor, and a record created again starts
	// above it, so that versions keep rising across delete and
	// re-creation (a process that applied the old record's last version
	// applies the new one's).
	DeleteBreaker(ctx context.Context, d BreakerDelete) (BreakerState, error)
}

// BreakerNotifier is implemented by stores that announce, across
// processes, that a dependency's shared breaker changed state
// (PostgreSQL's LISTEN/NOTIFY). Stores without it are polled.
type BreakerNotifier interface {
	// ListenBreakers calls notify with a dependency's name whenever its
	// breaker changed state (tripped, half-opened, closed, was forced),
	// until ctx ends. notify("") means notifications may have been missed
	// (the first connection, or a reconnect): re-read every record.
	ListenBreakers(ctx context.Context, notify func(name string)) error
}

// The states of a shared breaker, named as breaker.State names them.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// BreakerState is a dependency's circuit breaker as the processes sharing
// the store see it.
type BreakerState struct {
	// Name is the dependency's name (the breaker's name).
	Name string `json:"name"`
	// State is BreakerClosed, BreakerOpen or BreakerHalfOpen.
	State string `json:"state"`
	// Since is when the breaker entered State.
	Since time.Time `json:"since"`
	// OpenedBy is who opened the breaker last: a process (its worker id)
	// whose failures tripped it, or the operator named by SetBreaker.
	// Kept after the breaker closes, with OpenedAt.
	OpenedBy string `json:"opened_by,omitempty"`
	// OpenedAt is when the breaker last opened; zero if it never did.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	// ReadyAt is, while open, when the breaker lets a probe through. It is
	// zero for a breaker forced open until an operator closes it.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// Forced is true while the breaker is open because an operator forced
	// it (SetBreaker): no probe is granted before ReadyAt.
	Forced bool `json:"forced,omitempty"`
	// ProbeBy is, while half-open, the process holding the probe, and
	// ProbeUntil when its lease ends: another process may probe then.
	ProbeBy    string    `json:"probe_by,omitempty"`
	ProbeUntil time.Time `json:"probe_until,omitzero"`
	// Window is the counting window of the latest report.
	Window Duration `json:"window_ms"`
	// Counts are the latest counts of each process that reported during
	// the current closed period, oldest report first. Counts older than
	// Window are dropped at the next report.
	Counts []BreakerCount `json:"counts,omitempty"`
	// Trips counts every time the fleet's breaker opened.
	Trips int64 `json:"trips"`
	// Version grows with every change of the record; a process applies a
	// record only if it is newer than the last one it applied.
	Version int64 `json:"version"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// Totals returns the fleet's failures and requests: the sums of the
// counts reported after now minus Window.
func (st *BreakerState) Totals(now time.Time) (failures, requests int) {
	failures, requests, _ = st.totals(now)
	return failures, requests
}

// totals is Totals with the fleet's run of failures in a row: the sum of
// the processes' runs (each process reports when a success breaks its
// run, so no success happened anywhere in the fleet since the first
// failure of these runs).
func (st *BreakerState) totals(now time.Time) (failures, requests, streak int) {
	cut := now.Add(-time.Duration(st.Window))
	for _, c := range st.Counts {
		if c.At.After(cut) {
			failures += c.Failures
			requests += c.Requests
			streak += c.Streak
		}
	}
	return failures, requests, streak
}

// BreakerCount is the latest report of one process for a dependency.
type BreakerCount struct {
	// Process is the reporting process (its worker id).
	Process string `json:"process"`
	// Failures and Requests are the process's own counts within the
	// window when it reported: failures, and completed calls (failures
	// included; zero for a breaker that does not count calls).
	Failures int `json:"failures"`
	Requests int `json:"requests"`
	// Streak is the process's failures in a row when it reported, with
	// no success since (0 once a success broke the run).
	Streak int `json:"streak,omitempty"`
	// At is when the process reported.
	At time.Time `json:"at"`
}

// BreakerRule is the trip rule the fleet's counts are held to: the
// breaker trips when the fleet's failures within Window reach Failures
// (when Failures > 0) and, when Ratio > 0, failures/requests reaches
// Ratio with at least MinRequests requests. At least one of Failures and
// Ratio must be positive.
type BreakerRule struct {
	Failures    int
	Ratio       float64
	MinRequests int
	// Consecutive, when above zero, also trips the breaker when the
	// fleet's failures in a row (the sum of the processes' runs) reach it,
	// whatever the ratio (with MinRequests).
	Consecutive int
	Window      time.Duration
	// BreakDuration is how long a tripped breaker stays open.
	BreakDuration time.Duration
}

// Met reports whether the counts trip a breaker under the rule.
func (r BreakerRule) Met(failures, requests int) bool {
	if r.Failures <= 0 && r.Ratio <= 0 {
		return false
	}
	if r.Failures > 0 && failures < r.Failures {
		return false
	}
	if r.Ratio > 0 {
		if requests <= 0 || requests < r.MinRequests || float64(failures)/float64(requests) < r.Ratio {
			return false
		}
	}
	return true
}

func (r BreakerRule) validate() error {
	switch {
	case r.Failures < 0:
		return fmt.Errorf("%w: rule failures %d is negative", ErrInvalid, r.Failures)
	case math.IsNaN(r.Ratio) || r.Ratio < 0 || r.Ratio > 1:
		return fmt.Errorf("%w: rule ratio %v is not in [0, 1]", ErrInvalid, r.Ratio)
	case r.Failures == 0 && r.Ratio == 0:
		return fmt.Errorf("%w: rule has neither a failure count nor a ratio", ErrInvalid)
	case r.MinRequests < 0:
		return fmt.Errorf("%w: rule min requests %d is negative", ErrInvalid, r.MinRequests)
	case r.Consecutive < 0:
		return fmt.Errorf("%w: rule consecutive %d is negative", ErrInvalid, r.Consecutive)
	case r.Window <= 0:
		return fmt.Errorf("%w: rule window %v is not positive", ErrInvalid, r.Window)
	case r.BreakDuration <= 0:
		return fmt.Errorf("%w: rule break duration %v is not positive", ErrInvalid, r.BreakDuration)
	}
	return nil
}

// BreakerReport is what a process reports to ReportBreaker after a failure
// on its closed breaker.
type BreakerReport struct {
	// Name is the dependency; Process the reporting process (worker id).
	Name    string
	Process string
	// Now is the report's time.
	Now time.Time
	// Failures and Requests are the process's counts within the rule's
	// window: they replace its previous report.
	Failures int
	Requests int
	// Streak is the process's failures in a row, with no success since
	// (0 when it reports that a success broke its run).
	Streak int
	// Tripped is true when the process's own breaker opened on its own
	// counts: the fleet's opens too.
	Tripped bool
	// ReadyAt, when set with Tripped, is when the process's breaker
	// half-opens; by default Now + Rule.BreakDuration.
	ReadyAt time.Time
	// Rule is the trip rule the fleet's counts are held to.
	Rule BreakerRule
}

// BreakerClaim asks ClaimBreakerProbe for the probe.
type BreakerClaim struct {
	Name    string
	Process string
	Now     time.Time
	// Until is when the probe's lease ends if its outcome is not reported
	// (the process died): another process may probe then.
	Until time.Time
}

// BreakerSettle reports a probe's outcome to SettleBreakerProbe.
type BreakerSettle struct {
	Name    string
	Process string
	Now     time.Time
	// OK is true when the probe succeeded: the breaker closes.
	OK bool
	// ReadyAt is, when the probe failed, the end of the new open period.
	ReadyAt time.Time
}

// BreakerSet is an operator's decision for SetBreaker.
type BreakerSet struct {
	Name string
	// State is BreakerOpen (force open) or BreakerClosed (reset).
	State string
	// By names who decided ("operator" when empty); it becomes OpenedBy
	// when the breaker opens.
	By  string
	Now time.Time
	// Until is, when forcing open, when the breaker may be probed again;
	// zero keeps it open until it is closed.
	Until time.Time
}

// BreakerDelete asks DeleteBreaker to delete a dependency's record.
type BreakerDelete struct {
	Name string
	// Now is the deletion's time, against which recent use is judged.
	Now time.Time
	// Force deletes the record even when it is in use: an open breaker
	// closes for the fleet (each process closes its own at its next probe)
	// and the counts reported within the window are forgotten.
	Force bool
}

// Validate checks a deletion before a store applies it.
func (d BreakerDelete) Validate() error {
	if err := CheckBreakerName(d.Name); err != nil {
		return err
	}
	if d.Now.IsZero() {
		return fmt.Errorf("%w: breaker delete: now is zero", ErrInvalid)
	}
	return nil
}

// BreakerIdle is how long a closed breaker's record must have been left
// unchanged (no process reported on it, no probe, no operator) before it
// counts as unused and may be deleted, unless its counting window is
// longer: then the window (so that no count the trip rule still uses is
// lost).
const BreakerIdle = 5 * time.Minute

// BreakerInUseError is DeleteBreaker's refusal to delete a record in use.
// errors.Is(err, ErrConflict) holds.
type BreakerInUseError struct {
	// Name is the breaker's; Reason says, in words, why it is in use.
	Name   string
	Reason string
}

func (e *BreakerInUseError) Error() string {
	return fmt.Sprintf("breaker %q is in use: %s", e.Name, e.Reason)
}

// Is makes a BreakerInUseError match ErrConflict.
func (e *BreakerInUseError) Is(target error) bool { return target == ErrConflict }

// CheckBreakerDelete returns nil when st, the record held locked by the
// store, may be deleted at d.Now, and a *BreakerInUseError saying why
// not otherwise. A record is unused when no process or operator has
// changed it for the idle period (BreakerIdle, or its window if longer)
// and nothing waits on it:
//
//   - closed, and unchanged for the idle period (no count the trip rule
//     still uses is lost);
//   - open by trips, its break over for the idle period with no process
//     asking for the probe (none calls the dependency any more);
//   - half-open, the probe's lease over for the idle period with no
//     process taking it over;
//   - forced open by an operator, at any time (deleting it is the
//     operator's next decision).
//
// d.Force deletes whatever the state.
func CheckBreakerDelete(st *BreakerState, d BreakerDelete) error {
	if d.Force {
		return nil
	}
	idle := max(BreakerIdle, time.Duration(st.Window))
	// quiet reports whether nothing happened from t (or the last change,
	// if later) for the idle period.
	quiet := func(t time.Time) bool {
		if st.UpdatedAt.After(t) {
			t = st.UpdatedAt
		}
		return !d.Now.Before(t.Add(idle))
	}
	inUse := func(format string, args ...any) error {
		return &BreakerInUseError{Name: st.Name, Reason: fmt.Sprintf(format, args...)}
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	const override = "close it first (reset), or delete with force"
	switch st.State {
	case BreakerOpen:
		if st.Forced || (!st.ReadyAt.IsZero() && quiet(st.ReadyAt)) {
			return nil
		}
		return inUse("open since %s, tripped by %s, until %s (unused once no process has asked for its probe for %s after that); %s",
			at(st.Since), st.OpenedBy, at(st.ReadyAt), shortdur.String(idle), override)
	case BreakerHalfOpen:
		if quiet(st.ProbeUntil) {
			return nil
		}
		return inUse("half-open: %s holds the probe until %s (unused once no process has taken it over for %s after that); %s",
			st.ProbeBy, at(st.ProbeUntil), shortdur.String(idle), override)
	}
	if !quiet(st.UpdatedAt) {
		last := "changed"
		switch n := len(st.Counts); {
		case n > 0:
			last = "reported on by " + st.Counts[n-1].Process
		case st.Since.Equal(st.UpdatedAt):
			last = "closed"
		}
		return inUse("closed, but %s at %s, less than %s ago: a breaker is unused once left alone that long; delete with force to override",
			last, at(st.UpdatedAt), shortdur.String(idle))
	}
	return nil
}

// maxBreakerName bounds a dependency's name, in bytes.
const maxBreakerName = 200

// CheckBreakerName returns an ErrInvalid error for a name that cannot name
// a shared breaker: empty, longer than 200 bytes, not valid UTF-8 or with
// control characters.
func CheckBreakerName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: breaker name is empty", ErrInvalid)
	case len(name) > maxBreakerName:
		return fmt.Errorf("%w: breaker name is %d bytes long; the limit is %d", ErrInvalid, len(name), maxBreakerName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: breaker name is not valid UTF-8", ErrInvalid)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: breaker name %q contains a control character", ErrInvalid, name)
	}
	return nil
}

// Validate checks a report before a store applies it.
func (r BreakerReport) Validate() error {
	if err := CheckBreakerName(r.Name); err != nil {
		return err
	}
	switch {
	case r.Process == "":
		return fmt.Errorf("%w: breaker report: process is empty", ErrInvalid)
	case r.Now.IsZero():
		return fmt.Errorf("%w: breaker report: now is zero", ErrInvalid)
	case r.Failures < 0 || r.Requests < 0 || r.Streak < 0:
		return fmt.Errorf("%w: breaker report: negative counts (%d failures, %d requests, %d in a row)", ErrInvalid, r.Failures, r.Requests, r.Streak)
	}
	return r.Rule.validate()
}

// Validate checks a claim before a store applies it.
func (c BreakerClaim) Validate() error {
	if err := CheckBreakerName(c.Name); err != nil {
		return err
	}
	switch {
	case c.Process == "":
		return fmt.Errorf("%w: breaker claim: process is empty", ErrInvalid)
	case c.Now.IsZero():
		return fmt.Errorf("%w: breaker claim: now is zero", ErrInvalid)
	case !c.Until.After(c.Now):
		return fmt.Errorf("%w: breaker claim: until %v is not after now %v", ErrInvalid, c.Until, c.Now)
	}
	return nil
}

// Validate checks a probe's outcome before a store applies it.
func (s BreakerSettle) Validate() error {
	if err := CheckBreakerName(s.Name); err != nil {
		return err
	}
	switch {
	case s.Process == "":
		return fmt.Errorf("%w: breaker settle: process is empty", ErrInvalid)
	case s.Now.IsZero():
		return fmt.Errorf("%w: breaker settle: now is zero", ErrInvalid)
	case !s.OK && !s.ReadyAt.After(s.Now):
		return fmt.Errorf("%w: breaker settle: a failed probe needs ready_at after now", ErrInvalid)
	}
	return nil
}

// Validate checks an operator's decision before a store applies it.
func (p BreakerSet) Validate() error {
	if err := CheckBreakerName(p.Name); err != nil {
		return err
	}
	switch {
	case p.State != BreakerOpen && p.State != BreakerClosed:
		return fmt.Errorf("%w: breaker state %q: want %s or %s", ErrInvalid, p.State, BreakerOpen, BreakerClosed)
	case p.Now.IsZero():
		return fmt.Errorf("%w: breaker set: now is zero", ErrInvalid)
	case !p.Until.IsZero() && !p.Until.After(p.Now):
		return fmt.Errorf("%w: breaker set: until %v is not after now %v", ErrInvalid, p.Until, p.Now)
	case p.State == BreakerClosed && !p.Until.IsZero():
		return fmt.Errorf("%w: breaker set: until applies to %s only", ErrInvalid, BreakerOpen)
	}
	return nil
}

// NewBreakerState returns the record of a dependency that has none yet:
// closed since now, version 0 (the first change makes it 1).
func NewBreakerState(name string, now time.Time) BreakerState {
	return BreakerState{Name: name, State: BreakerClosed, Since: now, UpdatedAt: now}
}

// touch marks a change of st at now.
func (st *BreakerState) touch(now time.Time) {
	st.Version++
	st.UpdatedAt = now
}

func (st *BreakerState) open(by string, now, readyAt time.Time, forced bool) {
	st.State = BreakerOpen
	st.Since = now
	st.OpenedBy = by
	st.OpenedAt = now
	st.ReadyAt = readyAt
	st.Forced = forced
	st.ProbeBy, st.ProbeUntil = "", time.Time{}
	st.Counts = nil
	st.Trips++
}

func (st *BreakerState) close(now time.Time) {
	st.State = BreakerClosed
	st.Since = now
	st.ReadyAt = time.Time{}
	st.Forced = false
	st.ProbeBy, st.ProbeUntil = "", time.Time{}
	st.Counts = nil
}

// ApplyBreakerReport applies r to st, the dependency's record held locked
// by the store, and reports whether st changed. On a closed breaker the
// process's counts replace its previous ones, counts older than the window
// are dropped, and the breaker opens (by r.Process, until r.ReadyAt or
// r.Now + the break duration) when r.Tripped or the fleet's totals meet
// r.Rule. A report on a breaker that is not closed changes nothing: the
// caller learns the fleet's state from st.
func ApplyBreakerReport(st *BreakerState, r BreakerReport) bool {
	if st.State != BreakerClosed {
		return false
	}
	st.Window = Duration(r.Rule.Window)
	cut := r.Now.Add(-r.Rule.Window)
	counts := st.Counts[:0:0]
	for _, c := range st.Counts {
		if c.Process != r.Process && c.At.After(cut) {
			counts = append(counts, c)
		}
	}
	st.Counts = append(counts, BreakerCount{Process: r.Process, Failures: r.Failures, Requests: r.Requests, Streak: r.Streak, At: r.Now})
	failures, requests, streak := st.totals(r.Now)
	run := r.Rule.Consecutive > 0 && streak >= r.Rule.Consecutive && requests >= r.Rule.MinRequests
	if r.Tripped || run || r.Rule.Met(failures, requests) {
		readyAt := r.ReadyAt
		if !readyAt.After(r.Now) {
			readyAt = r.Now.Add(r.Rule.BreakDuration)
		}
		st.open(r.Process, r.Now, readyAt, false)
	}
	st.touch(r.Now)
	return true
}

// ApplyBreakerClaim applies c to st, reporting whether the probe is
// granted (st then changed to half-open with the lease). It is granted
// when st is open and its open period ended (for a forced breaker, only
// once its ReadyAt is set and passed), or half-open with an expired lease.
func ApplyBreakerClaim(st *BreakerState, c BreakerClaim) (granted bool) {
	switch st.State {
	case BreakerOpen:
		if st.ReadyAt.IsZero() || c.Now.Before(st.ReadyAt) {
			return false
		}
	case BreakerHalfOpen:
		if c.Now.Before(st.ProbeUntil) {
			return false
		}
	default:
		return false
	}
	if st.State != BreakerHalfOpen {
		st.Since = c.Now
	}
	st.State = BreakerHalfOpen
	st.Forced = false
	st.ProbeBy, st.ProbeUntil = c.Process, c.Until
	st.touch(c.Now)
	return true
}

// ApplyBreakerSettle applies a probe's outcome to st and reports whether
// st changed: only the process holding the probe of a half-open breaker
// settles it.
func ApplyBreakerSettle(st *BreakerState, s BreakerSettle) bool {
	if st.State != BreakerHalfOpen || st.ProbeBy != s.Process {
		return false
	}
	if s.OK {
		st.close(s.Now)
	} else {
		st.open(s.Process, s.Now, s.ReadyAt, false)
	}
	st.touch(s.Now)
	return true
}

// ApplyBreakerSet applies an operator's decision to st. Forcing open
// counts a trip unless the breaker was already open (then only its
// deadline and OpenedBy change); closing clears the counts.
func ApplyBreakerSet(st *BreakerState, p BreakerSet) {
	by := p.By
	if by == "" {
		by = "operator"
	}
	if p.State == BreakerOpen {
		if st.State == BreakerOpen {
			st.OpenedBy, st.ReadyAt, st.Forced = by, p.Until, true
		} else {
			st.open(by, p.Now, p.Until, true)
		}
	} else {
		st.close(p.Now)
	}
	st.touch(p.Now)
}

// SortBreakers sorts records by name, as ListBreakers returns them.
func SortBreakers(bs []BreakerState) {
	slices.SortFunc(bs, func(a, b BreakerState) int { return strings.Compare(a.Name, b.Name) })
}
