package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
)

// TestPriorityCommands: enqueue --priority and jobs priority, on the
// store and through the API; jobs ls --json shows the priority; bad
// input is refused naming the flag or argument, and nothing is stored.
func TestPriorityCommands(t *testing.T) {
	clearConnEnv(t)
	ts, srvDB, client := newBareTestServer(t, "")
	for _, mode := range []struct {
		name string
		conn []string
		db   string
	}{
		{"direct", []string{"--db", sqlitetest.Path(t)}, ""},
		{"remote", []string{"--server", ts.URL}, srvDB},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cli := func(args ...string) string {
				t.Helper()
				return mustCLI(t, append(args, mode.conn...)...)
			}
			j := decode[redrive.Job](t, cli("--json", "enqueue", "k", "--priority", "7", "--delay", "1h"))
			if j.Priority != 7 {
				t.Fatalf("enqueue --priority 7: %+v", j)
			}
			list := decode[redrive.ListResult](t, cli("--json", "jobs", "ls"))
			found := false
			for _, l := range list.Jobs {
				found = found || (l.ID == j.ID && l.Priority == 7)
			}
			if !found {
				t.Errorf("jobs ls --json: no job %d with priority 7 in %+v", j.ID, list.Jobs)
			}
			if out := cli("jobs", "show", itoa(j.ID)); !strings.Contains(out, "priority") || !strings.Contains(out, "7") {
				t.Errorf("jobs show: %q", out)
			}
			if out := cli("jobs", "priority", itoa(j.ID), "--priority", "-20"); !strings.Contains(out, "priority -20") {
				t.Errorf("jobs priority: %q", out)
			}
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"enqueue", "k", "--priority", "101"}, "--priority must be an integer from -100 to 100, got 101"},
				{[]string{"enqueue", "k", "--priority", "high"}, "--priority"},
				{[]string{"jobs", "priority", itoa(j.ID), "--priority", "1.5"}, `--priority`},
				{[]string{"jobs", "priority", itoa(j.ID), "--priority", "-101"}, "--priority must be an integer from -100 to 100, got -101"},
				{[]string{"jobs", "priority", itoa(j.ID)}, "--priority is required"},
				{[]string{"jobs", "priority", "99999", "--priority", "1"}, "job 99999 not found"},
			} {
				_, stderr, err := runCLI(t, append(c.args, mode.conn...)...)
				if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
					t.Errorf("redrive %s: %v %s, want %q", strings.Join(c.args, " "), err, stderr, c.want)
				}
			}
			list = decode[redrive.ListResult](t, cli("--json", "jobs", "ls"))
			if len(list.Jobs) != 1 || list.Jobs[0].Priority != -20 {
				t.Errorf("after the refusals: %+v, want the one job, priority -20", list.Jobs)
			}
		})
	}
	// A running job's priority cannot change (through the API).
	j, err := client.Enqueue(context.Background(), "k", nil, redrive.InQueue("run"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := client.Store().Fetch(context.Background(), store.FetchParams{Queue: "run", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runCLI(t, "jobs", "priority", itoa(j.ID), "--priority", "1", "--server", ts.URL)
	if err == nil || !strings.Contains(err.Error()+stderr, "not waiting") {
		t.Errorf("jobs priority of a running job: %v %s", err, stderr)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
