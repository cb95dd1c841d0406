package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Schedules is the part of a Store that keeps the schedules of periodic
// jobs. A schedule is a row per name: its spec as last declared (opaque
// JSON the engine encodes), whether it is paused, and its cursor, the
// occurrence up to which every occurrence is decided (enqueued, or
// skipped by the missed-run policy). The engine enqueues each occurrence
// with an idempotency key of its own, then advances the cursor with a
// compare-and-set (AdvanceSchedule), so two processes that both believe
// they lead can never both advance it, and neither enqueues an
// occurrence twice. Every method given a name that no schedule can have
// (CheckScheduleName) returns ErrInvalid.
type Schedules interface {
	// DeclareSchedule records a schedule as declared by a process and
	// returns it as stored. A new name is inserted not paused, with its
	// cursor at d.Cursor (nothing before it will run) and no last run;
	// an existing one takes d.Spec, and d.NextRun unless paused, and
	// keeps its paused state, cursor and last run. DeclaredAt becomes
	// now. A name or spec no store can keep is ErrInvalid.
	DeclareSchedule(ctx context.Context, d ScheduleDecl, now time.Time) (Schedule, error)

	// ListSchedules returns every schedule, sorted by name.
	ListSchedules(ctx context.Context) ([]Schedule, error)

	// GetSchedule returns one schedule, or an error wrapping ErrNotFound
	// (ErrNoSchedule).
	GetSchedule(ctx context.Context, name string) (Schedule, error)

	// PauseSchedule pauses (paused true) or resumes a schedule and
	// returns it. Pausing keeps the time of the first pause; resuming
	// moves the cursor to now unless it is later (the occurrences of the
	// pause are skipped, none runs late) and sets NextRun to next. It is
	// idempotent. An unknown name is ErrNoSchedule.
	PauseSchedule(ctx context.Context, name string, paused bool, next, now time.Time) (Schedule, error)

	// AdvanceSchedule moves a schedule's cursor from a.From to a.To,
	// recording a.LastRun and a.LastJobID when a.LastJobID is not zero
	// and a.NextRun, only if its cursor is still a.From (compared to the
	// microsecond) and it is not paused. applied reports whether it did;
	// false means another process moved the cursor first, or the
	// schedule was paused or deleted, and nothing changed.
	AdvanceSchedule(ctx context.Context, a ScheduleAdvance) (applied bool, err error)

	// DeleteSchedule deletes a schedule (one no process declares any
	// more) and reports whether it existed. A process still declaring it
	// inserts it again, from its declaration's cursor.
	DeleteSchedule(ctx context.Context, name string) (bool, error)
}

// Schedule is a periodic job's schedule as stored.
type Schedule struct {
	// Name identifies the schedule; its jobs' idempotency keys derive
	// from it.
	Name string `json:"name"`
	// Spec is the schedule's declaration as its last declarer encoded it
	// (JSON: the engine reads it, the store keeps it).
	Spec json.RawMessage `json:"spec"`
	// Paused is set while the schedule is paused: nothing is enqueued.
	Paused bool `json:"paused"`
	// PausedAt is when it was paused; zero when it is not paused.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// Cursor is the time up to which every occurrence is decided.
	Cursor time.Time `json:"cursor"`
	// LastRun is the latest occurrence enqueued (zero: none yet), and
	// LastJobID the job enqueued for it.
	LastRun   time.Time `json:"last_run,omitzero"`
	LastJobID int64     `json:"last_job_id,omitempty"`
	// NextRun is the next occurrence as its leader last computed it
	// (zero: none).
	NextRun time.Time `json:"next_run,omitzero"`
	// CreatedAt is when the schedule was first declared; DeclaredAt when
	// it was last declared; UpdatedAt when the row last changed.
	CreatedAt  time.Time `json:"created_at"`
	DeclaredAt time.Time `json:"declared_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ScheduleDecl is a schedule as a process declares it.
type ScheduleDecl struct {
	Name string
	Spec json.RawMessage
	// Cursor is the cursor of a new schedule: its first occurrence is the
	// first after it.
	Cursor time.Time
	// NextRun is the first occurrence after the cursor as the declarer
	// computes it (zero: none).
	NextRun time.Time
}

// ScheduleAdvance moves a schedule's cursor (AdvanceSchedule).
type ScheduleAdvance struct {
	Name string
	// From fences the advance: the cursor the caller read.
	From time.Time
	// To is the new cursor.
	To time.Time
	// LastRun and LastJobID record the latest occurrence enqueued, when
	// LastJobID is not zero.
	LastRun   time.Time
	LastJobID int64
	// NextRun is the first occurrence after To (zero: none).
	NextRun time.Time
	Now     time.Time
}

// MaxScheduleName bounds a schedule's name, in bytes.
const MaxScheduleName = 200

// MaxScheduleSpec bounds a schedule's encoded spec, in bytes.
const MaxScheduleSpec = 64 << 10

// ErrNoSchedule means no schedule has the requested name. It wraps
// ErrNotFound.
var ErrNoSchedule error = noSchedule{}

type noSchedule struct{}

func (noSchedule) Error() string        { return "schedule not found" }
func (noSchedule) Is(target error) bool { return target == ErrNotFound }

// CheckScheduleName returns an ErrInvalid error for a name that cannot
// name a schedule: empty, longer than MaxScheduleName bytes, not valid
// UTF-8, with control characters, white space at either end, or a '/'
// (names appear in URL paths).
func CheckScheduleName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: schedule name is empty", ErrInvalid)
	case len(name) > MaxScheduleName:
		return fmt.Errorf("%w: schedule name is %d bytes long; the limit is %d", ErrInvalid, len(name), MaxScheduleName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: schedule name is not valid UTF-8", ErrInvalid)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: schedule name %q contains a control character", ErrInvalid, name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: schedule name %q begins or ends with white space", ErrInvalid, name)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: schedule name %q contains '/'", ErrInvalid, name)
	}
	return nil
}

// CheckScheduleDecl reports, as an ErrInvalid error, a declaration no
// store can keep: a bad name (CheckScheduleName), a spec that is not a
// JSON object or longer than MaxScheduleSpec, a zero cursor. Stores call
// it from DeclareSchedule.
func CheckScheduleDecl(d *ScheduleDecl) error {
	if err := CheckScheduleName(d.Name); err != nil {
		return err
	}
	spec := strings.TrimSpace(string(d.Spec))
	switch {
	case len(d.Spec) > MaxScheduleSpec:
		return fmt.Errorf("%w: schedule %q: spec is %d bytes long; the limit is %d", ErrInvalid, d.Name, len(d.Spec), MaxScheduleSpec)
	case !strings.HasPrefix(spec, "{") || !json.Valid(d.Spec):
		return fmt.Errorf("%w: schedule %q: spec is not a JSON object", ErrInvalid, d.Name)
	case d.Cursor.IsZero():
		return fmt.Errorf("%w: schedule %q: cursor is zero", ErrInvalid, d.Name)
	}
	return nil
}
