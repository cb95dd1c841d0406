// Package schedule computes the occurrences of periodic jobs: cron
// expressions (five fields or a descriptor such as @daily) in a named time
// zone, and fixed intervals. It is pure: every function takes the time it
// works from, so that it is tested with fixed clocks and no sleeping.
//
// Cron expressions are parsed by github.com/robfig/cron/v3 and evaluated
// on the wall clock of the schedule's zone; the package then maps each
// wall-clock occurrence to one instant, so that a daylight saving change
// neither drops nor repeats an occurrence:
//
//   - a wall-clock time that does not exist (the hour skipped when clocks
//     go forward) runs when it would have been, had the clocks not moved:
//     02:30 on a spring-forward day at 02:00 runs at 03:30 of the new
//     offset;
//   - a wall-clock time that occurs twice (the hour repeated when clocks
//     go back) runs once, at its first occurrence.
//
// An interval schedule runs at every whole multiple of its interval since
// the Unix epoch (1970-01-01 00:00 UTC), whatever its zone: every 1h runs
// at each full hour UTC, every 1s at each whole second. Every process
// therefore computes the same occurrences.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec is a schedule as declared: exactly one of Cron and Every.
type Spec struct {
	// Cron is a five-field cron expression (minute hour day-of-month
	// month day-of-week) or one of the descriptors @yearly, @annually,
	// @monthly, @weekly, @daily, @midnight, @hourly.
	Cron string
	// Every is a fixed interval: at least MinEvery, in whole
	// milliseconds.
	Every time.Duration
	// Zone is the IANA name of the time zone Cron is read in
	// ("America/New_York"); empty means UTC. It must be empty or UTC
	// for an interval.
	Zone string
}

// MinEvery is the shortest interval a schedule may have.
const MinEvery = time.Second

// MaxCronLength bounds a cron expression's length in bytes.
const MaxCronLength = 256

// Schedule is a parsed Spec. It is safe for concurrent use.
type Schedule struct {
	spec  Spec
	cron  *cron.SpecSchedule // evaluated on wall clocks, in UTC
	loc   *time.Location
	every time.Duration
}

// FieldError is a Spec's error: Field names the field ("cron", "every" or
// "time_zone").
type FieldError struct {
	Field string
	Err   error
}

// Error says the field and what is wrong with it.
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the field's error.
func (e *FieldError) Unwrap() error { return e.Err }

// parser reads the five standard fields and the descriptors, nothing else
// (no seconds field).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse checks s and returns its schedule. Errors are *FieldError values
// naming the field at fault.
func Parse(s Spec) (*Schedule, error) {
	switch {
	case s.Cron == "" && s.Every == 0:
		return nil, &FieldError{"cron", errors.New("a schedule needs a cron expression or an interval (every)")}
	case s.Cron != "" && s.Every != 0:
		return nil, &FieldError{"every", errors.New("a schedule has a cron expression or an interval, not both")}
	}
	loc, err := LoadZone(s.Zone)
	if err != nil {
		return nil, &FieldError{"time_zone", err}
	}
	if s.Every != 0 {
		switch {
		case s.Every < MinEvery:
			return nil, &FieldError{"every", fmt.Errorf("%s is shorter than the minimum %s", s.Every, MinEvery)}
		case s.Every%time.Millisecond != 0:
			return nil, &FieldError{"every", fmt.Errorf("%s is not a whole number of milliseconds", s.Every)}
		case loc != time.UTC:
			return nil, &FieldError{"time_zone", errors.New("an interval runs at multiples of itself since the Unix epoch, in no time zone: leave time_zone empty")}
		}
		return &Schedule{spec: s, loc: time.UTC, every: s.Every}, nil
	}
	c, err := ParseCron(s.Cron)
	if err != nil {
		return nil, &FieldError{"cron", err}
	}
	return &Schedule{spec: s, cron: c, loc: loc}, nil
}

// LoadZone loads an IANA time zone by name; "" and "UTC" are UTC. "Local"
// is refused: processes sharing a store may not share a local zone.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, errors.New(`"Local" depends on the machine: name the zone (e.g. "Europe/Paris")`)
	}
	if len(name) > 64 || strings.ContainsAny(name, "\x00\\") || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return loc, nil
}

// ParseCron parses a five-field cron expression or a descriptor. It
// refuses @every (use an interval) and a TZ= prefix (use the zone field),
// and an expression that never matches (such as February 30th).
func ParseCron(expr string) (*cron.SpecSchedule, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, errors.New("empty cron expression")
	case len(e) > MaxCronLength:
		return nil, fmt.Errorf("cron expression longer than %d bytes", MaxCronLength)
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return nil, fmt.Errorf("%q: give the time zone in its own field, not as a prefix", expr)
	case strings.HasPrefix(e, "@every"):
		return nil, fmt.Errorf("%q: give an interval in the every field", expr)
	}
	s, err := parseCron(e)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	// A leap day matches within four years; an expression that matches
	// nothing in five years from any start never does.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%q never matches a date", expr)
	}
	return s, nil
}

// parseCron runs the parser, turning a panic in it into an error.
func parseCron(e string) (s *cron.SpecSchedule, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("cannot parse: %v", p)
		}
	}()
	sch, err := parser.Parse(e)
	if err != nil {
		return nil, err
	}
	spec, ok := sch.(*cron.SpecSchedule)
	if !ok {
		return nil, errors.New("not a calendar schedule")
	}
	c := *spec
	c.Location = time.UTC // evaluated on wall clocks written in UTC
	return &c, nil
}

// Spec returns the spec the schedule was parsed from.
func (s *Schedule) Spec() Spec { return s.spec }

// Location returns the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// maxShift bounds how far apart the wall clock and UTC move at a zone's
// transition (real zones shift by at most two hours at once).
const maxShift = 3 * time.Hour

// Next returns the first occurrence strictly after t, or the zero time if
// there is none within five years.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		ms := t.UnixMilli()
		e := s.every.Milliseconds()
		k := ms / e
		if ms < 0 && ms%e != 0 {
			k-- // floor division
		}
		return time.UnixMilli((k + 1) * e).UTC()
	}
	t = t.Truncate(time.Second) // occurrences are whole minutes: nothing is lost
	w := wall(t, s.loc)
	// Fast path: no transition of the zone near t and its next occurrence,
	// so wall clock and instants move together.
	c := s.cron.Next(w)
	if c.IsZero() {
		return time.Time{}
	}
	if m := instant(c, s.loc); m.After(t) && steady(t.Add(-maxShift), m.Add(maxShift), s.loc) {
		return m
	}
	// Near a transition the mapping from wall clock to instants is not
	// monotonic: scan the wall-clock occurrences from maxShift before t
	// and keep the earliest instant after t.
	var best, bestWall time.Time
	for c := s.cron.Next(w.Add(-maxShift)); !c.IsZero(); c = s.cron.Next(c) {
		if !best.IsZero() && c.After(bestWall.Add(maxShift)) {
			break
		}
		if m := instant(c, s.loc); m.After(t) && (best.IsZero() || m.Before(best)) {
			best, bestWall = m, c
		}
	}
	return best
}

// steady reports whether loc has one UTC offset from a to b.
func steady(a, b time.Time, loc *time.Location) bool {
	if loc == time.UTC {
		return true
	}
	start, end := a.In(loc).ZoneBounds()
	return !start.After(a) && (end.IsZero() || end.After(b))
}

// wall returns the wall-clock reading of t in loc, written as a UTC time.
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant maps a wall-clock reading of loc (written as a UTC time) to the
// instant it names. A reading that occurs twice names the first; one that
// does not exist (skipped by clocks going forward) names the instant it
// would have been under the offset in force before the change.
func instant(w time.Time, loc *time.Location) time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	if wall(t, loc).Equal(w) {
		// Go names the first of two readings only sometimes: prefer the
		// earlier instant with the same reading.
		for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -30 * time.Minute} {
			if e := t.Add(d); wall(e, loc).Equal(w) {
				return e.UTC()
			}
		}
		return t.UTC()
	}
	// In a gap (the clocks went forward at some instant T near t), the
	// reading names the instant it would have been under the offset in
	// force before T, which is the offset well before t: no real zone
	// changes its offset twice within a few hours.
	_, off := t.Add(-2 * maxShift).Zone()
	return w.Add(-time.Duration(off) * time.Second).UTC()
}
