package store

import (
	"context"
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

// MaxLimit bounds a limit's Max.
const MaxLimit = 1_000_000

// MaxLimitName bounds, in bytes, a limit's name and a job's limit key.
const MaxLimitName = 200

// Limits is the part of a Store that keeps concurrency limits.
type Limits interface {
	// SetLimit sets the limit named name to max running jobs per group,
	// creating it if there is none, and returns its state. It takes
	// effect at the next fetch: lowering it below the running count
	// stops new starts until enough jobs end; no running job is stopped.
	// A bad name or a max out of [1, MaxLimit] is ErrInvalid.
	SetLimit(ctx context.Context, name string, max int, now time.Time) (LimitState, error)

	// ListLimits returns every limit, sorted by name, with its use now.
	ListLimits(ctx context.Context, now time.Time) ([]LimitState, error)
}

// LimitState is a concurrency limit and its use now.
type LimitState struct {
	Name string `json:"name"`
	// Max is how many jobs of one group may run at once.
	Max int `json:"max"`
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
// new job that no store keeps: a key or max without a limit, a bad limit
// name or key, a max out of range. Stores call it from Enqueue.
func CheckNewLimit(nj *NewJob) error {
	if nj.Limit == "" {
		if nj.LimitKey != "" || nj.LimitMax != 0 {
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
	return CheckLimitMax(nj.LimitMax)
}
