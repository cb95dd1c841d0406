package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, s Spec) *Schedule {
	t.Helper()
	sch, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", s, err)
	}
	return sch
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s not available: %v", name, err)
	}
	return loc
}

// nexts returns n successive occurrences after from.
func nexts(s *Schedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func checkTimes(t *testing.T, what string, got []time.Time, want []string, loc *time.Location) {
	t.Helper()
	g := make([]string, len(got))
	for i, x := range got {
		g[i] = x.In(loc).Format(time.RFC3339)
	}
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Errorf("%s:\n got %v\nwant %v", what, g, want)
	}
}

// TestDailyAt2DaylightSaving: the daily-at-2-a.m. schedule in New York
// across both changes of 2026. On 8 March clocks go from 01:59:59 EST to
// 03:00 EDT, so 02:00 does not exist: the occurrence runs at 03:00 EDT,
// the instant 02:00 EST would have been, and the day is not skipped. On 1
// November clocks go from 01:59:59 EDT back to 01:00 EST: 02:00 happens
// once, at 02:00 EST (07:00 UTC), and runs once.
func TestDailyAt2DaylightSaving(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	for _, expr := range []string{"0 2 * * *", "00 02 * * *"} {
		s := mustParse(t, Spec{Cron: expr, Zone: "America/New_York"})
		spring := nexts(s, time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 4)
		checkTimes(t, expr+" around spring forward", spring, []string{
			"2026-03-07T02:00:00-05:00",
			"2026-03-08T03:00:00-04:00", // 02:00 EST does not exist: 07:00 UTC
			"2026-03-09T02:00:00-04:00",
			"2026-03-10T02:00:00-04:00",
		}, ny)
		if got := spring[1].UTC().Format(time.RFC3339); got != "2026-03-08T07:00:00Z" {
			t.Errorf("spring-forward occurrence at %s UTC, want 07:00 UTC", got)
		}
		fall := nexts(s, time.Date(2026, 10, 30, 12, 0, 0, 0, ny), 4)
		checkTimes(t, expr+" around fall back", fall, []string{
			"2026-10-31T02:00:00-04:00",
			"2026-11-01T02:00:00-05:00",
			"2026-11-02T02:00:00-05:00",
			"2026-11-03T02:00:00-05:00",
		}, ny)
		// Asked from inside the repeated hour (01:30 EDT, then 01:30 EST),
		// the next run is the same 02:00 EST.
		first := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)  // 01:30 EDT
		second := time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC) // 01:30 EST
		for _, from := range []time.Time{first, second} {
			if got := s.Next(from); !got.Equal(time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)) {
				t.Errorf("Next(%s) = %s, want 2026-11-01T07:00:00Z", from.In(ny), got.In(ny))
			}
		}
		// Asked from inside the gap's replacement (03:00 EDT itself and
		// just before), nothing runs twice.
		at3 := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
		if got := s.Next(at3.Add(-time.Second)); !got.Equal(at3) {
			t.Errorf("Next(just before 03:00 EDT) = %s, want %s", got.In(ny), at3.In(ny))
		}
		if got := s.Next(at3); !got.Equal(time.Date(2026, 3, 9, 6, 0, 0, 0, time.UTC)) {
			t.Errorf("Next(03:00 EDT on 8 March) = %s, want 2026-03-09 02:00 EDT", got.In(ny))
		}
	}
	// The Plan over a whole year gives one run per day, none twice.
	s := mustParse(t, Spec{Cron: "@daily", Zone: "America/New_York"})
	s2 := mustParse(t, Spec{Cron: "0 2 * * *", Zone: "America/New_York"})
	for _, sc := range []*Schedule{s, s2} {
		start := time.Date(2026, 1, 1, 0, 30, 0, 0, ny)
		occ := nexts(sc, start, 365)
		days := map[string]bool{}
		for i, o := range occ {
			d := o.In(ny).Format("2006-01-02")
			if days[d] {
				t.Errorf("%s: two runs on %s", sc.Spec().Cron, d)
			}
			days[d] = true
			if i > 0 && !o.After(occ[i-1]) {
				t.Errorf("%s: occurrence %s not after %s", sc.Spec().Cron, o, occ[i-1])
			}
		}
		if len(days) != 365 || !days["2026-03-08"] || !days["2026-11-01"] {
			t.Errorf("%s: %d days with a run in 2026, want 365 including both changes", sc.Spec().Cron, len(days))
		}
	}
}

// TestSubHourlyAcrossChanges: an every-15-minutes cron in New York on both
// change days: the skipped hour's readings fall onto the instants after
// the gap (no instant twice), the repeated hour runs once.
func TestSubHourlyAcrossChanges(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	s := mustParse(t, Spec{Cron: "*/30 * * * *", Zone: "America/New_York"})
	spring := nexts(s, time.Date(2026, 3, 8, 1, 0, 0, 0, ny), 4)
	checkTimes(t, "spring", spring, []string{
		"2026-03-08T01:30:00-05:00",
		"2026-03-08T03:00:00-04:00", // 02:00 and 03:00 name the same instant
		"2026-03-08T03:30:00-04:00", // so do 02:30 and 03:30
		"2026-03-08T04:00:00-04:00",
	}, ny)
	fall := nexts(s, time.Date(2026, 11, 1, 0, 15, 0, 0, ny), 5)
	checkTimes(t, "fall", fall, []string{
		"2026-11-01T00:30:00-04:00",
		"2026-11-01T01:00:00-04:00",
		"2026-11-01T01:30:00-04:00",
		"2026-11-01T02:00:00-05:00", // 01:00 and 01:30 EST are the same readings: not again
		"2026-11-01T02:30:00-05:00",
	}, ny)
	// Paris, whose offsets are east of UTC, changes at 02:00 and 03:00.
	paris := mustZone(t, "Europe/Paris")
	p := mustParse(t, Spec{Cron: "30 2 * * *", Zone: "Europe/Paris"})
	checkTimes(t, "Paris spring", nexts(p, time.Date(2026, 3, 28, 12, 0, 0, 0, paris), 2), []string{
		"2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"}, paris)
	checkTimes(t, "Paris fall", nexts(p, time.Date(2026, 10, 24, 12, 0, 0, 0, paris), 2), []string{
		"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}, paris)
}

func TestEvery(t *testing.T) {
	s := mustParse(t, Spec{Every: time.Second})
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	checkTimes(t, "every 1s", nexts(s, at, 3), []string{"2026-01-02T03:04:06Z", "2026-01-02T03:04:07Z", "2026-01-02T03:04:08Z"}, time.UTC)
	h := mustParse(t, Spec{Every: 90 * time.Minute})
	if got := h.Next(time.Unix(0, 0)); !got.Equal(time.Unix(5400, 0)) {
		t.Errorf("every 90m after the epoch: %s", got)
	}
	if got := h.Next(time.Unix(-1, 0)); !got.Equal(time.Unix(0, 0)) {
		t.Errorf("every 90m after one second before the epoch: %s", got)
	}
	if got := h.Next(time.Unix(5399, 0).In(time.FixedZone("X", 3600))); !got.Equal(time.Unix(5400, 0)) {
		t.Errorf("every 90m from another zone: %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		spec  Spec
		field string
		text  string
	}{
		{Spec{}, "cron", "needs a cron expression or an interval"},
		{Spec{Cron: "* * * * *", Every: time.Minute}, "every", "not both"},
		{Spec{Cron: "* * * *"}, "cron", "expected exactly 5 fields"},
		{Spec{Cron: "0 0 * * * *"}, "cron", "expected exactly 5 fields"},
		{Spec{Cron: "61 * * * *"}, "cron", "above maximum"},
		{Spec{Cron: "@every 1h"}, "cron", "interval"},
		{Spec{Cron: "TZ=UTC 0 2 * * *"}, "cron", "own field"},
		{Spec{Cron: "@sometimes"}, "cron", "unrecognized descriptor"},
		{Spec{Cron: "0 0 30 2 *"}, "cron", "never matches"},
		{Spec{Cron: "0 2 * * *", Zone: "Mars/Olympus"}, "time_zone", "unknown time zone"},
		{Spec{Cron: "0 2 * * *", Zone: "Local"}, "time_zone", "depends on the machine"},
		{Spec{Cron: "0 2 * * *", Zone: "../../etc/passwd"}, "time_zone", "unknown time zone"},
		{Spec{Every: 500 * time.Millisecond}, "every", "shorter than"},
		{Spec{Every: time.Second + time.Microsecond}, "every", "milliseconds"},
		{Spec{Every: time.Minute, Zone: "Europe/Paris"}, "time_zone", "interval"},
		{Spec{Cron: strings.Repeat("1,", 200) + "1 * * * *"}, "cron", "longer than"},
	} {
		_, err := Parse(c.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.text) {
			t.Errorf("Parse(%+v) = %v, want a %s error containing %q", c.spec, err, c.field, c.text)
		}
	}
	for _, ok := range []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "0 2 * * *", "*/5 9-17 * * MON-FRI", "0 0 29 2 *", " 0 2 * * * "} {
		if _, err := Parse(Spec{Cron: ok, Zone: "Europe/Paris"}); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}

func TestPlan(t *testing.T) {
	sec := mustParse(t, Spec{Every: time.Second})
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := func(d int) time.Time { return base.Add(time.Duration(d) * time.Second) }

	// Nothing due yet.
	p := sec.Plan(s(0), s(0).Add(500*time.Millisecond), time.Minute, Skip, 100)
	if len(p.Run) != 0 || !p.Cursor.Equal(s(0)) || !p.Next.Equal(s(1)) || p.Skipped {
		t.Errorf("nothing due: %+v", p)
	}
	// Three due within the grace: all run, oldest first.
	p = sec.Plan(s(0), s(3).Add(200*time.Millisecond), time.Minute, Skip, 100)
	checkTimes(t, "within grace", p.Run, []string{"2026-01-02T03:04:06Z", "2026-01-02T03:04:07Z", "2026-01-02T03:04:08Z"}, time.UTC)
	if !p.Cursor.Equal(s(3)) || !p.Next.Equal(s(4)) || p.Skipped {
		t.Errorf("within grace: cursor %s next %s skipped %v", p.Cursor, p.Next, p.Skipped)
	}
	// The limit: the cursor stops at the last returned, the next call
	// goes on.
	p = sec.Plan(s(0), s(3), time.Minute, Skip, 2)
	if len(p.Run) != 2 || !p.Cursor.Equal(s(2)) {
		t.Errorf("limit 2: %+v", p)
	}
	p = sec.Plan(p.Cursor, s(3), time.Minute, Skip, 2)
	if len(p.Run) != 1 || !p.Run[0].Equal(s(3)) {
		t.Errorf("after the limit: %+v", p)
	}
	// Down 10 minutes with a 5 s grace: skip runs only the last 5 s
	// (s(596)..s(600): at or after now-grace).
	now := s(600)
	p = sec.Plan(s(0), now, 5*time.Second, Skip, 100)
	if len(p.Run) != 6 || !p.Run[0].Equal(s(595)) || !p.Run[5].Equal(s(600)) || !p.Skipped || !p.Cursor.Equal(s(600)) {
		t.Errorf("skip: %v cursor %s skipped %v", p.Run, p.Cursor, p.Skipped)
	}
	// Run once: the latest missed (s(594)) then the recent ones.
	p = sec.Plan(s(0), now, 5*time.Second, RunOnce, 100)
	if len(p.Run) != 7 || !p.Run[0].Equal(s(594)) || !p.Run[1].Equal(s(595)) || !p.Skipped {
		t.Errorf("run once: %v skipped %v", p.Run, p.Skipped)
	}
	// Daily at 2 a.m., everything down from the day before to 09:00:
	// skip runs nothing, run once runs the 02:00 of today.
	ny := mustZone(t, "America/New_York")
	daily := mustParse(t, Spec{Cron: "0 2 * * *", Zone: "America/New_York"})
	cursor := time.Date(2026, 3, 1, 2, 0, 0, 0, ny)
	now = time.Date(2026, 3, 8, 9, 0, 0, 0, ny)
	p = daily.Plan(cursor, now, time.Minute, Skip, 100)
	if len(p.Run) != 0 || !p.Skipped || !p.Next.Equal(time.Date(2026, 3, 9, 2, 0, 0, 0, ny)) {
		t.Errorf("daily skip: %+v", p)
	}
	p = daily.Plan(cursor, now, time.Minute, RunOnce, 100)
	checkTimes(t, "daily run once", p.Run, []string{"2026-03-08T03:00:00-04:00"}, ny)
	// Nothing missed: no skip reported, and the cursor stays where it
	// was (a pass with nothing to do writes nothing).
	p = daily.Plan(time.Date(2026, 3, 8, 3, 0, 0, 0, ny), now, time.Minute, RunOnce, 100)
	if len(p.Run) != 0 || p.Skipped || !p.Cursor.Equal(time.Date(2026, 3, 8, 3, 0, 0, 0, ny)) {
		t.Errorf("daily nothing missed: %+v", p)
	}
	// A yearly schedule three years behind finds its latest missed
	// occurrence.
	yearly := mustParse(t, Spec{Cron: "@yearly"})
	p = yearly.Plan(time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), time.Minute, RunOnce, 10)
	checkTimes(t, "yearly run once", p.Run, []string{"2026-01-01T00:00:00Z"}, time.UTC)
	// Run once for an interval a month behind, no grace: the latest.
	p = sec.Plan(s(-86400*30), s(0).Add(300*time.Millisecond), 0, RunOnce, 10)
	if len(p.Run) != 1 || !p.Run[0].Equal(s(0)) || !p.Cursor.Equal(s(0).Add(299*time.Millisecond)) {
		t.Errorf("interval run once: %v", p.Run)
	}
}
