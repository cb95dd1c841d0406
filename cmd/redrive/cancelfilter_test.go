package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// seedWaiting enqueues n pending jobs of queue (payload {"doc": i}) and,
// when scheduled, n more due in an hour, and returns their ids.
func seedWaiting(t *testing.T, db, queue string, n int, scheduled bool) []int64 {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	var ids []int64
	for i := range n {
		opts := []redrive.Option{redrive.InQueue(queue)}
		j, err := c.Enqueue(context.Background(), "doc", map[string]int{"doc": i}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
		if scheduled {
			j, err := c.Enqueue(context.Background(), "doc", map[string]int{"doc": i}, append(opts, redrive.At(time.Now().Add(time.Hour)))...)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
	}
	return ids
}

// statesOf counts the jobs of queue per state.
func statesOf(t *testing.T, db, queue string) map[store.State]int64 {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[store.State]int64{}
	for _, j := range allJobs(t, st, store.Filter{Queue: queue}) {
		out[j.State]++
	}
	return out
}

// TestJobsCancelBulk: jobs cancel with filters, ids or --all cancels the
// pending and scheduled jobs selected as a durable operation, directly on
// a store and through a server; it asks first (and says --yes when the
// input is not a terminal); one id alone keeps the single-job cancel.
func TestJobsCancelBulk(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	seedWaiting(t, db, "mail", 3, true) // 3 pending, 3 scheduled
	seedWaiting(t, db, "other", 2, false)

	// Without --yes and no answer, nothing is canceled.
	if _, _, err := runCLIIn(t, "", "--db", db, "jobs", "cancel", "--queue", "mail"); err == nil {
		t.Fatal("cancel without --yes and no answer succeeded")
	}
	if got := statesOf(t, db, "mail"); got[store.Canceled] != 0 {
		t.Fatalf("canceled without confirmation: %v", got)
	}
	// Scheduled only, with a payload match.
	out := mustCLI(t, "--db", db, "jobs", "cancel", "--queue", "mail", "--state", "scheduled", "--match", "payload.doc=1", "--note", "n", "--yes")
	wantIn(t, out, "done: 1/1 (canceled 1)")
	if got := statesOf(t, db, "mail"); got[store.Canceled] != 1 || got[store.Scheduled] != 2 || got[store.Pending] != 3 {
		t.Fatalf("after the scheduled-only cancel: %v", got)
	}
	out = mustCLI(t, "--db", db, "jobs", "cancel", "--queue", "mail", "--yes")
	wantIn(t, out, "done: 5/5 (canceled 5)")
	if got := statesOf(t, db, "mail"); got[store.Canceled] != 6 {
		t.Fatalf("after the cancel: %v", got)
	}
	if got := statesOf(t, db, "other"); got[store.Pending] != 2 {
		t.Fatalf("another queue: %v", got)
	}
	wantIn(t, mustCLI(t, "--db", db, "jobs", "cancel", "--queue", "mail", "--yes"), "nothing to cancel")

	// Refusals.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "cancel"}, "say which jobs to cancel"},
		{[]string{"jobs", "cancel", "--state", "running", "--yes"}, "pending or scheduled"},
		{[]string{"jobs", "cancel", "1", "2", "--queue", "q", "--yes"}, "not both"},
		{[]string{"jobs", "cancel", "--all", "--match", "doc=1", "--yes"}, "--match"},
	} {
		if _, _, err := runCLI(t, append([]string{"--db", db}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}

	// Through a server, whose worker runs it: by ids, then --all.
	ts, sdb := newTestServer(t, "tok")
	ids := seedWaiting(t, sdb, "mail", 2, false)
	out = mustCLI(t, "--server", ts.URL, "--token", "tok", "jobs", "cancel", strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1]+100, 10), "--yes")
	wantIn(t, out, "canceled 1", "skipped 1")
	out = mustCLI(t, "--server", ts.URL, "--token", "tok", "jobs", "cancel", "--all", "--yes")
	wantIn(t, out, "done: 1/1 (canceled 1)")
	if got := statesOf(t, sdb, "mail"); got[store.Canceled] != 2 {
		t.Fatalf("through the server: %v", got)
	}
	// One id alone: the single-job cancel, as before.
	id := seedWaiting(t, sdb, "solo", 1, false)[0]
	wantIn(t, mustCLI(t, "--server", ts.URL, "--token", "tok", "jobs", "cancel", strconv.FormatInt(id, 10)), "canceled")
}
