package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fmtSchedule formats a schedule's stored fields for comparison (its spec
// as a JSON value, times to the microsecond, zero times as "-").
func fmtSchedule(sc store.Schedule) string {
	ft := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmtTime(t)
	}
	return fmt.Sprintf("{%q spec=%s paused=%v at=%s cursor=%s last=%s job=%d next=%s created=%s declared=%s updated=%s}",
		sc.Name, canonJSON(sc.Spec), sc.Paused, ft(sc.PausedAt), ft(sc.Cursor), ft(sc.LastRun), sc.LastJobID, ft(sc.NextRun),
		ft(sc.CreatedAt), ft(sc.DeclaredAt), ft(sc.UpdatedAt))
}

// checkSchedule fails unless got is want.
func (x *h) checkSchedule(what string, got, want store.Schedule) {
	x.t.Helper()
	if g, w := fmtSchedule(got), fmtSchedule(want); g != w {
		x.t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// declare calls DeclareSchedule and fails on an error.
func (x *h) declare(d store.ScheduleDecl, now time.Time) store.Schedule {
	x.t.Helper()
	sc, err := x.s.DeclareSchedule(x.ctx, d, now)
	if err != nil {
		x.t.Fatalf("DeclareSchedule(%q): %v", d.Name, err)
	}
	return sc
}

// getSchedule calls GetSchedule and fails on an error.
func (x *h) getSchedule(name string) store.Schedule {
	x.t.Helper()
	sc, err := x.s.GetSchedule(x.ctx, name)
	if err != nil {
		x.t.Fatalf("GetSchedule(%q): %v", name, err)
	}
	return sc
}

// advance calls AdvanceSchedule and fails on an error.
func (x *h) advance(a store.ScheduleAdvance) bool {
	x.t.Helper()
	ok, err := x.s.AdvanceSchedule(x.ctx, a)
	if err != nil {
		x.t.Fatalf("AdvanceSchedule(%q): %v", a.Name, err)
	}
	return ok
}

// pauseSchedule calls PauseSchedule and fails on an error.
func (x *h) pauseSchedule(name string, paused bool, next, now time.Time) store.Schedule {
	x.t.Helper()
	sc, err := x.s.PauseSchedule(x.ctx, name, paused, next, now)
	if err != nil {
		x.t.Fatalf("PauseSchedule(%q, %v): %v", name, paused, err)
	}
	return sc
}

// testSchedulesDeclare: a new schedule starts at its declaration's cursor,
// not paused; declaring it again replaces its spec and next run and keeps
// its cursor, last run and creation time; the list is sorted by name;
// times in other zones are the same instants.
func testSchedulesDeclare(x *h) {
	list, err := x.s.ListSchedules(x.ctx)
	if err != nil || list == nil || len(list) != 0 {
		x.t.Fatalf("ListSchedules of an empty store: %v, %v; want an empty slice", list, err)
	}
	east := time.FixedZone("UTC+5", 5*3600)
	d := store.ScheduleDecl{Name: "reindex", Spec: raw(`{"cron": "0 2 * * *", "kind": "reindex"}`), Cursor: at(0), NextRun: at(time.Hour)}
	got := x.declare(d, at(time.Second).In(east))
	want := store.Schedule{Name: "reindex", Spec: d.Spec, Cursor: at(0), NextRun: at(time.Hour),
		CreatedAt: at(time.Second), DeclaredAt: at(time.Second), UpdatedAt: at(time.Second)}
	x.checkSchedule("declared", got, want)
	x.checkSchedule("get", x.getSchedule("reindex"), want)

	// The leader advances it; a second declaration (a restart, another
	// process, a changed spec) keeps the cursor and last run.
	if !x.advance(store.ScheduleAdvance{Name: "reindex", From: at(0), To: at(time.Hour), LastRun: at(time.Hour), LastJobID: 7,
		NextRun: at(2 * time.Hour), Now: at(time.Hour + time.Second)}) {
		x.t.Fatal("advance from the declared cursor was not applied")
	}
	d2 := store.ScheduleDecl{Name: "reindex", Spec: raw(`{"cron": "0 3 * * *", "kind": "reindex"}`), Cursor: at(5 * time.Hour), NextRun: at(3 * time.Hour)}
	got = x.declare(d2, at(2*time.Hour))
	want = store.Schedule{Name: "reindex", Spec: d2.Spec, Cursor: at(time.Hour), LastRun: at(time.Hour), LastJobID: 7, NextRun: at(3 * time.Hour),
		CreatedAt: at(time.Second), DeclaredAt: at(2 * time.Hour), UpdatedAt: at(2 * time.Hour)}
	x.checkSchedule("declared again", got, want)

	// Sorted by name, bytewise.
	for _, n := range []string{"b", "Z", "a-b", "été"} {
		x.declare(store.ScheduleDecl{Name: n, Spec: raw(`{}`), Cursor: at(0)}, at(0))
	}
	list, err = x.s.ListSchedules(x.ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	var names []string
	for _, sc := range list {
		names = append(names, sc.Name)
	}
	if strings.Join(names, ",") != "Z,a-b,b,reindex,été" {
		x.t.Errorf("ListSchedules names: %v, want [Z a-b b reindex été]", names)
	}
	x.checkSchedule("listed", list[3], want)
}

// testSchedulesAdvance: the cursor moves only from the value it holds
// (compare-and-set, to the microsecond); an advance without a job keeps
// the last run; a paused schedule does not advance; an unknown one
// reports false.
func testSchedulesAdvance(x *h) {
	x.declare(store.ScheduleDecl{Name: "s", Spec: raw(`{"every": "1s"}`), Cursor: at(0)}, at(0))
	if x.advance(store.ScheduleAdvance{Name: "s", From: at(time.Microsecond), To: at(time.Second), LastRun: at(time.Second), LastJobID: 1, Now: at(time.Second)}) {
		x.t.Error("advance from a cursor one microsecond off was applied")
	}
	if !x.advance(store.ScheduleAdvance{Name: "s", From: at(0).In(time.FixedZone("W", -7*3600)), To: at(time.Second), LastRun: at(time.Second),
		LastJobID: 1, NextRun: at(2 * time.Second), Now: at(time.Second)}) {
		x.t.Fatal("advance from the cursor (in another zone) was not applied")
	}
	// The same advance again: the cursor moved, nothing changes.
	if x.advance(store.ScheduleAdvance{Name: "s", From: at(0), To: at(time.Second), LastRun: at(time.Second), LastJobID: 2, Now: at(time.Second)}) {
		x.t.Error("a second advance from the old cursor was applied")
	}
	// Skipping missed occurrences: no job, the last run stays.
	if !x.advance(store.ScheduleAdvance{Name: "s", From: at(time.Second), To: at(time.Minute), NextRun: at(time.Minute + time.Second), Now: at(time.Minute)}) {
		x.t.Fatal("advance without a job was not applied")
	}
	x.checkSchedule("after two advances", x.getSchedule("s"), store.Schedule{Name: "s", Spec: raw(`{"every": "1s"}`), Cursor: at(time.Minute),
		LastRun: at(time.Second), LastJobID: 1, NextRun: at(time.Minute + time.Second), CreatedAt: at(0), DeclaredAt: at(0), UpdatedAt: at(time.Minute)})
	// Paused: no advance.
	x.pauseSchedule("s", true, time.Time{}, at(2*time.Minute))
	if x.advance(store.ScheduleAdvance{Name: "s", From: at(time.Minute), To: at(2 * time.Minute), Now: at(2 * time.Minute)}) {
		x.t.Error("a paused schedule advanced")
	}
	if x.advance(store.ScheduleAdvance{Name: "nope", From: at(0), To: at(time.Second), Now: at(time.Second)}) {
		x.t.Error("an unknown schedule advanced")
	}
}

// testSchedulesPause: pause keeps the time of the first pause and is
// idempotent; resume moves the cursor to now (the paused occurrences are
// skipped) but never back, takes the next run given, and is idempotent;
// a declaration keeps a schedule paused; unknown names are ErrNotFound.
func testSchedulesPause(x *h) {
	spec := raw(`{"cron": "* * * * *"}`)
	x.declare(store.ScheduleDecl{Name: "p", Spec: spec, Cursor: at(0), NextRun: at(time.Minute)}, at(0))
	want := store.Schedule{Name: "p", Spec: spec, Paused: true, PausedAt: at(time.Second), Cursor: at(0), NextRun: at(time.Minute),
		CreatedAt: at(0), DeclaredAt: at(0), UpdatedAt: at(time.Second)}
	x.checkSchedule("pause", x.pauseSchedule("p", true, time.Time{}, at(time.Second)), want)
	want.UpdatedAt = at(2 * time.Second)
	x.checkSchedule("pause again", x.pauseSchedule("p", true, time.Time{}, at(2*time.Second)), want)
	// Declared while paused: stays paused, keeps its next run.
	want.DeclaredAt, want.UpdatedAt = at(3*time.Second), at(3*time.Second)
	x.checkSchedule("declared while paused", x.declare(store.ScheduleDecl{Name: "p", Spec: spec, Cursor: at(3 * time.Second), NextRun: at(9 * time.Minute)}, at(3*time.Second)), want)

	want = store.Schedule{Name: "p", Spec: spec, Cursor: at(10 * time.Minute), NextRun: at(11 * time.Minute),
		CreatedAt: at(0), DeclaredAt: at(3 * time.Second), UpdatedAt: at(10 * time.Minute)}
	x.checkSchedule("resume", x.pauseSchedule("p", false, at(11*time.Minute), at(10*time.Minute)), want)
	want.UpdatedAt = at(12 * time.Minute)
	x.checkSchedule("resume again (not paused: the cursor stays)", x.pauseSchedule("p", false, at(13*time.Minute), at(12*time.Minute)), want)

	// A resume never moves the cursor back.
	x.declare(store.ScheduleDecl{Name: "q", Spec: spec, Cursor: at(time.Hour)}, at(0))
	x.pauseSchedule("q", true, time.Time{}, at(time.Second))
	if sc := x.pauseSchedule("q", false, at(2*time.Hour), at(time.Minute)); !sameTime(sc.Cursor, at(time.Hour)) {
		x.t.Errorf("resume at a time before the cursor moved it to %s, want %s", fmtTime(sc.Cursor), fmtTime(at(time.Hour)))
	}

	_, err := x.s.PauseSchedule(x.ctx, "nope", true, time.Time{}, at(0))
	x.checkErr("PauseSchedule of an unknown name", err, store.ErrNotFound)
	_, err = x.s.GetSchedule(x.ctx, "nope")
	x.checkErr("GetSchedule of an unknown name", err, store.ErrNotFound)
	if !errors.Is(err, store.ErrNoSchedule) {
		x.t.Errorf("GetSchedule of an unknown name: %v, want ErrNoSchedule", err)
	}
}

// testSchedulesDelete: a deleted schedule is gone; deleting it again
// reports false; declaring it again starts afresh.
func testSchedulesDelete(x *h) {
	x.declare(store.ScheduleDecl{Name: "d", Spec: raw(`{}`), Cursor: at(0)}, at(0))
	x.advance(store.ScheduleAdvance{Name: "d", From: at(0), To: at(time.Hour), LastRun: at(time.Hour), LastJobID: 3, Now: at(time.Hour)})
	for i, want := range []bool{true, false} {
		ok, err := x.s.DeleteSchedule(x.ctx, "d")
		if err != nil || ok != want {
			x.t.Errorf("DeleteSchedule #%d: %v, %v; want %v", i+1, ok, err, want)
		}
	}
	_, err := x.s.GetSchedule(x.ctx, "d")
	x.checkErr("GetSchedule after delete", err, store.ErrNotFound)
	sc := x.declare(store.ScheduleDecl{Name: "d", Spec: raw(`{}`), Cursor: at(2 * time.Hour)}, at(2*time.Hour))
	if !sameTime(sc.Cursor, at(2*time.Hour)) || !sc.LastRun.IsZero() || sc.LastJobID != 0 {
		x.t.Errorf("declared again after delete: %s", fmtSchedule(sc))
	}
}

// testSchedulesInvalid: names and specs no store can keep are ErrInvalid,
// and change nothing.
func testSchedulesInvalid(x *h) {
	for _, d := range []store.ScheduleDecl{
		{Name: "", Spec: raw(`{}`), Cursor: at(0)},
		{Name: "a/b", Spec: raw(`{}`), Cursor: at(0)},
		{Name: "nul\x00", Spec: raw(`{}`), Cursor: at(0)},
		{Name: " x", Spec: raw(`{}`), Cursor: at(0)},
		{Name: "\xff", Spec: raw(`{}`), Cursor: at(0)},
		{Name: strings.Repeat("n", store.MaxScheduleName+1), Spec: raw(`{}`), Cursor: at(0)},
		{Name: "x", Spec: raw(`[1]`), Cursor: at(0)},
		{Name: "x", Spec: raw(`{`), Cursor: at(0)},
		{Name: "x", Spec: nil, Cursor: at(0)},
		{Name: "x", Spec: raw(`{}`)},
		{Name: "x", Spec: raw(`{"a":"` + strings.Repeat("a", store.MaxScheduleSpec) + `"}`), Cursor: at(0)},
	} {
		_, err := x.s.DeclareSchedule(x.ctx, d, at(0))
		x.checkErr(fmt.Sprintf("DeclareSchedule(%.40q, %.40s)", d.Name, d.Spec), err, store.ErrInvalid)
	}
	_, err := x.s.GetSchedule(x.ctx, "a/b")
	x.checkErr("GetSchedule of a bad name", err, store.ErrInvalid)
	_, err = x.s.PauseSchedule(x.ctx, "", true, time.Time{}, at(0))
	x.checkErr("PauseSchedule of a bad name", err, store.ErrInvalid)
	_, err = x.s.AdvanceSchedule(x.ctx, store.ScheduleAdvance{Name: "\x00", From: at(0), To: at(1), Now: at(1)})
	x.checkErr("AdvanceSchedule of a bad name", err, store.ErrInvalid)
	_, err = x.s.DeleteSchedule(x.ctx, "")
	x.checkErr("DeleteSchedule of a bad name", err, store.ErrInvalid)
	if list, err := x.s.ListSchedules(x.ctx); err != nil || len(list) != 0 {
		x.t.Errorf("ListSchedules after bad declarations: %d schedules, %v; want none", len(list), err)
	}
}

// testSchedulesConcurrent: many processes declaring one schedule create
// one row with the first cursor kept; of many concurrent advances from
// the same cursor exactly one applies.
func testSchedulesConcurrent(x *h) {
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, err := x.s.DeclareSchedule(x.ctx, store.ScheduleDecl{Name: "c", Spec: raw(`{}`), Cursor: at(time.Duration(i) * time.Second)}, at(0))
			errs <- err
		})
	}
	wg.Wait()
	sc := x.getSchedule("c")
	var applied sync.Map
	for i := range n {
		wg.Go(func() {
			ok, err := x.s.AdvanceSchedule(x.ctx, store.ScheduleAdvance{Name: "c", From: sc.Cursor, To: sc.Cursor.Add(time.Hour),
				LastRun: sc.Cursor.Add(time.Hour), LastJobID: int64(i + 1), Now: at(time.Hour)})
			if ok {
				applied.Store(i+1, true)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			x.t.Fatal(err)
		}
	}
	var winners []int64
	applied.Range(func(k, _ any) bool { winners = append(winners, int64(k.(int))); return true })
	if len(winners) != 1 {
		x.t.Fatalf("%d concurrent advances from one cursor applied, want exactly 1", len(winners))
	}
	got := x.getSchedule("c")
	if got.LastJobID != winners[0] || !sameTime(got.Cursor, sc.Cursor.Add(time.Hour)) {
		x.t.Errorf("after the race: %s, want the winner's job %d", fmtSchedule(got), winners[0])
	}
	if list, _ := x.s.ListSchedules(x.ctx); len(list) != 1 {
		x.t.Errorf("%d schedules after concurrent declarations of one name, want 1", len(list))
	}
}
