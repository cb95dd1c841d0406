package store

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Size returns the page size a store uses for p: DefaultPageSize when
// Limit is 0 or negative, at most MaxPageSize.
func (p Page) Size() int {
	switch {
	case p.Limit <= 0:
		return DefaultPageSize
	case p.Limit > MaxPageSize:
		return MaxPageSize
	}
	return p.Limit
}

// Result makes the page a store returns from the jobs it read for p: it
// reads one job more than Size, so that more than Size jobs means a next
// page, whose cursor is positioned after the last job kept. Jobs is never
// nil.
func (p Page) Result(jobs []*Job, deadOnly bool) ListResult {
	res := ListResult{Jobs: jobs}
	if limit := p.Size(); len(jobs) > limit {
		res.Jobs = jobs[:limit]
		res.Next = EncodeCursor(jobs[limit-1], deadOnly)
	}
	if res.Jobs == nil {
		res.Jobs = []*Job{}
	}
	return res
}

// SelectsDead reports whether f can match dead jobs: it names no States,
// or its States include Dead. Groups and Purge, which concern dead jobs
// only, match nothing for a filter that excludes them.
func (f Filter) SelectsDead() bool {
	return len(f.States) == 0 || slices.Contains(f.States, Dead)
}

// DeadOnly reports whether f selects dead jobs only; such listings are
// ordered by dead_at (newest first) rather than by id.
func (f Filter) DeadOnly() bool {
	return len(f.States) == 1 && f.States[0] == Dead
}

// EncodeCursor returns the keyset cursor positioned after j: its id, or,
// in a dead-only listing, its dead_at (Unix microseconds) and id. Stores
// share this format; cursors are opaque to users.
func EncodeCursor(j *Job, deadOnly bool) string {
	s := strconv.FormatInt(j.ID, 10)
	if deadOnly && j.DeadAt != nil {
		s = strconv.FormatInt(j.DeadAt.UnixMicro(), 10) + "." + s
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// DecodeCursor parses a cursor made by EncodeCursor for the same kind of
// listing. deadAt is in Unix microseconds (0 unless deadOnly). A malformed
// cursor gives an error wrapping ErrInvalid.
func DecodeCursor(c string, deadOnly bool) (deadAt, id int64, err error) {
	bad := fmt.Errorf("%w: malformed cursor %q", ErrInvalid, c)
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return 0, 0, bad
	}
	parts := strings.Split(string(b), ".")
	if len(parts) > 2 || deadOnly != (len(parts) == 2) {
		return 0, 0, bad
	}
	// Only what EncodeCursor writes: non-negative numbers, written the
	// one way FormatInt writes them (no sign, no leading zero): "-1" is
	// refused, not read as a position before every job.
	num := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && n >= 0 && strconv.FormatInt(n, 10) == s
	}
	var ok bool
	if id, ok = num(parts[len(parts)-1]); !ok {
		return 0, 0, bad
	}
	if deadOnly {
		if deadAt, ok = num(parts[0]); !ok {
			return 0, 0, bad
		}
	}
	return deadAt, id, nil
}

// CauseOnly reports whether f narrows jobs by the fields of their cause
// only (queue, kind, class, reason, fingerprint, and states): no time
// bounds, error text or prefix, ids or payload. A store keeps the number of dead
// jobs of each cause, and answers the DLQ's groups and counts of such a
// filter from them instead of counting jobs.
func (f Filter) CauseOnly() bool {
	return f.Since.IsZero() && f.Until.IsZero() && f.ErrorContains == "" && f.ErrorPrefix == "" && len(f.IDs) == 0 &&
		f.PayloadField == "" && len(f.PayloadValue) == 0
}
