package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// workflowTarget is where the workflows commands of a test work: the
// connection flags, and the store underneath.
type workflowTarget struct {
	pre []string
	st  store.Store
	// local: the CLI works on the store itself (its audit actor is local).
	local bool
}

// workflowTargets are the four ways the workflows commands work: on
// SQLite and on PostgreSQL, directly and through a server on it.
func workflowTargets(t *testing.T) map[string]func(t *testing.T) workflowTarget {
	log := slog.New(slog.DiscardHandler)
	serve := func(t *testing.T, st store.Store) string {
		api := server.New(server.Options{Client: redrive.NewClient(st, redrive.ClientOptions{Logger: log}), Token: "tok", Logger: log})
		ts := httptest.NewServer(api)
		t.Cleanup(func() { api.Close(); ts.Close() })
		return ts.URL
	}
	openSQLite := func(t *testing.T) (store.Store, string) {
		db := filepath.Join(t.TempDir(), "redrive.db")
		st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, db
	}
	openPostgres := func(t *testing.T) (store.Store, []string) {
		u := pgURL(t)
		schema := fmt.Sprintf("redrive_wfcli_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
		st, err := postgres.Open(context.Background(), u, postgres.Options{Schema: schema, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(); dropSchema(t, u, schema) })
		return st, []string{"--database-url", u, "--schema", schema}
	}
	return map[string]func(t *testing.T) workflowTarget{
		"sqlite direct": func(t *testing.T) workflowTarget {
			st, db := openSQLite(t)
			return workflowTarget{pre: []string{"--db", db}, st: st, local: true}
		},
		"sqlite server": func(t *testing.T) workflowTarget {
			st, _ := openSQLite(t)
			return workflowTarget{pre: []string{"--server", serve(t, st), "--token", "tok"}, st: st}
		},
		"postgres direct": func(t *testing.T) workflowTarget {
			st, pre := openPostgres(t)
			return workflowTarget{pre: pre, st: st, local: true}
		},
		"postgres server": func(t *testing.T) workflowTarget {
			st, _ := openPostgres(t)
			return workflowTarget{pre: []string{"--server", serve(t, st), "--token", "tok"}, st: st}
		},
	}
}

// cliDiamond is a workflow file: A -> B, C -> D, with a success callback.
const cliDiamond = `{"name": "diamond", "idempotency_key": "order-7",
  "jobs": [
    {"name": "A", "kind": "email", "payload": {"n": 1}},
    {"name": "B", "kind": "email", "after": ["A"]},
    {"name": "C", "kind": "email", "after": ["A"], "queue": "mail"},
    {"name": "D", "kind": "email", "after": ["B", "C"]}],
  "on_success": {"kind": "notify"}}`

// TestWorkflowsCLI: workflows enqueue, ls, show and cancel, on SQLite and
// PostgreSQL, directly and through a server: the same words, the same
// refusals of a bad file (nothing stored), the cancel in the audit log.
func TestWorkflowsCLI(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range workflowTargets(t) {
		t.Run(mode, func(t *testing.T) {
			tg := setup(t)
			ctx := context.Background()
			cli := func(stdin string, args ...string) (string, string, error) {
				t.Helper()
				return runCLIIn(t, stdin, append(append([]string{}, tg.pre...), args...)...)
			}
			must := func(args ...string) string {
				t.Helper()
				out, stderr, err := cli("", args...)
				if err != nil {
					t.Fatalf("redrive %s: %v\n%s", strings.Join(args, " "), err, stderr)
				}
				return out
			}
			if out := must("workflows", "ls"); out != "no workflows\n" {
				t.Errorf("ls of none: %q", out)
			}
			file := filepath.Join(t.TempDir(), "diamond.json")
			if err := os.WriteFile(file, []byte(cliDiamond), 0o600); err != nil {
				t.Fatal(err)
			}
			out := must("workflows", "enqueue", file)
			if out != "enqueued workflow 1: 4 job(s), 1 due, 3 waiting for others; on_dead wait\n" {
				t.Errorf("enqueue: %q", out)
			}
			if out := must("workflows", "enqueue", file); !strings.Contains(out, `workflow 1 holds the idempotency key "order-7": nothing enqueued`) {
				t.Errorf("enqueue again: %q", out)
			}
			// From standard input, as JSON.
			out, stderr, err := cli(`{"on_dead":"run","jobs":[{"name":"only","kind":"email","delay":"1h"}]}`, "--json", "workflows", "enqueue", "-")
			if err != nil {
				t.Fatalf("enqueue -: %v %s", err, stderr)
			}
			second := decode[redrive.WorkflowInfo](t, out)
			if second.ID <= 1 || second.OnDead != redrive.RunOnDead || second.Total != 1 || second.Counts[redrive.Scheduled] != 1 {
				t.Errorf("enqueue - --json: %+v", second)
			}

			// Bad files: refused, naming what is wrong, nothing stored.
			jobsBefore, err := tg.st.Count(ctx, store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ body, says string }{
				{`{"jobs":[{"name":"a","kind":"k","after":["b"]},{"name":"b","kind":"k","after":["a"]}]}`, "cycle: a -> b -> a (field jobs)"},
				{`{"jobs":[{"name":"a","kind":"k","after":["x"]}]}`, "a -> x (field jobs[0].after)"},
				{`{"jobs":[{"name":"a","kind":"k"},{"name":"a","kind":"k"}]}`, `"a" is used twice`},
				{`{"jobs":[{"name":"a","kind":"k","kind":"j"}]}`, `"jobs[0].kind" is given more than once`},
				{`{"jobs":[]}`, "at least one job"},
				{`{"jobs":[{"name":"a","kind":"k","delay":"soon"}]}`, "(field jobs[0].delay)"},
			} {
				_, _, err := cli(c.body, "workflows", "enqueue", "-")
				if err == nil || !strings.Contains(err.Error(), c.says) || !strings.HasPrefix(err.Error(), "standard input: ") {
					t.Errorf("enqueue of %s: %v, want it refused saying %q", c.body, err, c.says)
				}
			}
			if _, _, err := cli("", "workflows", "enqueue", filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "no such file") {
				t.Errorf("enqueue of a missing file: %v", err)
			}
			if n, err := tg.st.Count(ctx, store.Filter{}); err != nil || n != jobsBefore {
				t.Errorf("refused files stored %d jobs (%v)", n-jobsBefore, err)
			}

			// ls: a table, and pages in JSON.
			out = must("workflows", "ls")
			for _, want := range []string{"ID", "STATE", "ON DEAD", "COMPLETED", "BLOCKED", "diamond", "active", "wait", "0/4", "run", "0/1"} {
				if !strings.Contains(out, want) {
					t.Errorf("ls lacks %q:\n%s", want, out)
				}
			}
			next := fmt.Sprint(second.ID)
			page := decode[server.WorkflowList](t, must("--json", "workflows", "ls", "--limit", "1"))
			if len(page.Workflows) != 1 || page.Workflows[0].ID != second.ID || page.Next != next {
				t.Errorf("ls --limit 1: %+v", page)
			}
			if out := must("workflows", "ls", "--limit", "1"); !strings.HasSuffix(out, "more: --before "+next+"\n") {
				t.Errorf("ls --limit 1 does not give the next page:\n%s", out)
			}
			page = decode[server.WorkflowList](t, must("--json", "workflows", "ls", "--before", next))
			if len(page.Workflows) != 1 || page.Workflows[0].ID != 1 || page.Next != "" {
				t.Errorf("ls --before 2: %+v", page)
			}

			// A completes: B and C are released.
			now := time.Now()
			got, err := tg.st.Fetch(ctx, store.FetchParams{Queue: "default", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
			if err != nil || len(got) != 1 {
				t.Fatalf("fetch: %d jobs, %v", len(got), err)
			}
			if _, err := tg.st.Finish(ctx, []store.Outcome{{JobID: got[0].ID, Queue: got[0].Queue, Attempt: got[0].Attempt, Lease: got[0].Lease,
				Worker: "w", Kind: store.Complete, At: now}}); err != nil {
				t.Fatal(err)
			}
			out = must("workflows", "show", "1")
			for _, want := range []string{"name             diamond", "state            active", "on dead          wait", "idempotency key  order-7",
				"progress         1/4 completed, 0 dead, 0 canceled", "jobs by state    pending 2, completed 1, blocked 1", "on success       job 5",
				"NAME", "AFTER", "A     1    email  completed", "B     2    email  pending    A", "D     4    email  blocked    B, C"} {
				if !strings.Contains(out, want) {
					t.Errorf("show lacks %q:\n%s", want, out)
				}
			}
			w := decode[redrive.WorkflowInfo](t, must("--json", "workflows", "show", "1"))
			if w.Completed != 1 || len(w.Jobs) != 4 || w.Jobs[3].State != store.Blocked || len(w.Jobs[3].After) != 2 {
				t.Errorf("show --json: %+v", w)
			}

			// add: E after A (completed) and D (blocked) waits; a name taken
			// is refused.
			out, stderr, err = cli(`{"jobs":[{"name":"E","kind":"email","after":["A","D"]}]}`, "workflows", "add", "1", "-")
			if err != nil || out != "added 1 job(s) to workflow 1: 0 due, 1 waiting for others; 5 job(s) in all\n" {
				t.Errorf("add: %q, %v %s", out, err, stderr)
			}
			if _, _, err := cli(`{"jobs":[{"name":"A","kind":"email"}]}`, "workflows", "add", "1", "-"); err == nil || !strings.Contains(err.Error(), `"A" is taken by job 1`) {
				t.Errorf("add of a name taken: %v", err)
			}
			if _, _, err := cli(`{"jobs":[{"name":"F","kind":"email","after":["F"]}]}`, "workflows", "add", "1", "-"); err == nil ||
				!strings.Contains(err.Error(), "cycle: F -> F (field jobs)") || !strings.HasPrefix(err.Error(), "standard input: ") {
				t.Errorf("add of a cycle: %v", err)
			}

			// cancel: its waiting jobs and callback; said again, nothing more.
			if out := must("workflows", "cancel", "1"); out != "workflow 1 canceled: 4 of its 5 jobs canceled\n" {
				t.Errorf("cancel: %q", out)
			}
			if _, _, err := cli(`{"jobs":[{"name":"G","kind":"email"}]}`, "workflows", "add", "1", "-"); err == nil || !strings.Contains(err.Error(), "workflow 1 is canceled") {
				t.Errorf("add to a canceled workflow: %v", err)
			}
			w = decode[redrive.WorkflowInfo](t, must("--json", "workflows", "cancel", "1"))
			if w.State != store.WorkflowCanceled || w.Canceled != 4 {
				t.Errorf("cancel --json: %+v", w)
			}
			if cb, err := tg.st.Get(ctx, 5); err != nil || cb.State != redrive.Canceled {
				t.Errorf("the success callback after the cancel: %+v, %v", cb, err)
			}
			action, actor := "POST /v1/workflows/{id}/cancel", "admin"
			if tg.local {
				action, actor = "workflows cancel", localActor
			}
			entries, _, err := tg.st.ListAudit(ctx, store.AuditFilter{}, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 2 || entries[0].Action != action || entries[0].Actor != actor || entries[0].Count != 4 {
				t.Errorf("audit log: %+v", entries)
			}

			// Unknown and bad ids.
			for _, args := range [][]string{{"workflows", "show", "99"}, {"workflows", "cancel", "99"}} {
				if _, _, err := cli("", args...); err == nil || !strings.Contains(err.Error(), "workflow 99 not found") {
					t.Errorf("%v: %v", args, err)
				}
			}
			if _, _, err := cli("", "workflows", "show", "x"); err == nil || !strings.Contains(err.Error(), `workflow id must be a positive integer, got "x"`) {
				t.Errorf("show x: %v", err)
			}
		})
	}
}
