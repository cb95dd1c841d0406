package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

func TestFmtCount(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 1234: "1,234", 123456: "123,456",
		1234567: "1,234,567", -1234: "-1,234", 9223372036854775807: "9,223,372,036,854,775,807",
	} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDLQSelectionWording(t *testing.T) {
	mail := filterOptions{}
	mail.Queue = "mail"
	text := filterOptions{}
	text.Q, text.Class = "bad address", "permanent"
	for _, c := range []struct {
		n    int64
		fo   filterOptions
		want string
	}{
		{1234, mail, "1,234 dead jobs matching queue=mail"},
		{1, mail, "1 dead job matching queue=mail"},
		{2, text, `2 dead jobs matching class=permanent error-contains="bad address"`},
		{1234, filterOptions{}, "all 1,234 dead jobs"},
		{1, filterOptions{}, "the only dead job"},
		{-1, mail, "the dead jobs matching queue=mail"},
		{-1, filterOptions{}, "every dead job"},
	} {
		if got := dlqSelection(c.n, c.fo); got != c.want {
			t.Errorf("dlqSelection(%d, %+v) = %q, want %q", c.n, c.fo.FilterBody, got, c.want)
		}
	}
	for v, want := range map[string]string{
		"mail": "mail", "2026-01-02T15:04:05Z": "2026-01-02T15:04:05Z", "a b": `"a b"`, `x"y`: `"x\"y"`,
		"a=b": `"a=b"`, "courriel": "courriel", "tab\t": `"tab\t"`,
	} {
		if got := quoteIfNeeded(v); got != want {
			t.Errorf("quoteIfNeeded(%q) = %q, want %q", v, got, want)
		}
	}
	for _, c := range []struct {
		shown       int
		total       int64
		later, dead bool
		want        string
	}{
		{50, 1234, false, true, "showing 50 of 1,234 dead jobs"},
		{50, 1234, true, false, "showing 50 more of 1,234 jobs"},
		{50, 10, false, false, "showing 50 of 50 jobs"},
		{1, 1, true, false, "showing 1 more of 1 job"},
		{50, -1, false, false, ""},
	} {
		if got := pageSummary(c.shown, c.total, c.later, c.dead); got != c.want {
			t.Errorf("pageSummary(%d, %d, %v, %v) = %q, want %q", c.shown, c.total, c.later, c.dead, got, c.want)
		}
	}
}

// countModes returns, for each way of reaching a store, the flags that
// select it and the SQLite database behind it.
func countModes(t *testing.T) map[string]func(t *testing.T) ([]string, string) {
	return map[string]func(t *testing.T) ([]string, string){
		"direct": func(t *testing.T) ([]string, string) {
			db := sqlitetest.Path(t)
			return []string{"--db", db}, db
		},
		"server": func(t *testing.T) ([]string, string) {
			ts, db := newTestServer(t, "tok")
			return []string{"--server", ts.URL, "--token", "tok"}, db
		},
	}
}

// TestConfirmationCounts: the confirmation prompts of dlq purge and dlq
// redrive name how many dead jobs they touch, identically directly and
// through a server; an empty selection does nothing and asks nothing.
func TestConfirmationCounts(t *testing.T) {
	clearConnEnv(t)
	prompts := map[string][]string{}
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			cli := func(stdin string, args ...string) (string, string, error) {
				t.Helper()
				return runCLIIn(t, stdin, append(append([]string{}, target...), args...)...)
			}
			for range 3 {
				mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail")
			}
			mustCLI(t, "--db", db, "enqueue", "sms", "--queue", "sms-q")
			mustCLI(t, "--db", db, "enqueue", "email", "--queue", "alive")
			bury(t, db, "mail")
			bury(t, db, "sms-q")

			// Answered no: the question carries the count; nothing is done.
			for _, args := range [][]string{
				{"dlq", "purge", "--queue", "mail"},
				{"dlq", "redrive", "--all", "--queue", "mail"},
				{"dlq", "purge", "--all"},
				{"dlq", "redrive", "--all"},
				{"dlq", "purge", "--queue", "sms-q"},
				{"dlq", "purge", "--error-contains", "bad address", "--kind", "email"},
				{"dlq", "redrive", "--all", "--since", "2000-01-01T00:00:00Z"},
			} {
				out, stderr, err := cli("n\n", args...)
				if err == nil || !strings.Contains(err.Error(), "not confirmed") || out != "" {
					t.Fatalf("%v answered n: %v, stdout %q", args, err, out)
				}
				prompts[mode] = append(prompts[mode], stderr)
			}
			wantPrompts := []string{
				"Purge 3 dead jobs matching queue=mail? [y/N] ",
				"Redrive 3 dead jobs matching queue=mail? [y/N] ",
				"Purge all 4 dead jobs? [y/N] ",
				"Redrive all 4 dead jobs? [y/N] ",
				"Purge 1 dead job matching queue=sms-q? [y/N] ",
				`Purge 3 dead jobs matching kind=email error-contains="bad address"? [y/N] `,
				"Redrive 4 dead jobs matching since=2000-01-01T00:00:00Z? [y/N] ",
			}
			for i, want := range wantPrompts {
				if prompts[mode][i] != want {
					t.Errorf("prompt %d: %q, want %q", i, prompts[mode][i], want)
				}
			}
			if res := decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "dlq", "ls")); len(res.Jobs) != 4 {
				t.Fatalf("%d dead jobs after the refusals, want 4", len(res.Jobs))
			}

			// Nothing selected: said on standard output, exit 0, and no
			// question (the empty standard input would refuse one).
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"dlq", "purge", "--queue", "alive"}, "no dead job matches queue=alive: nothing to purge\n"},
				{[]string{"dlq", "redrive", "--all", "--queue", "nope"}, "no dead job matches queue=nope: nothing to redrive\n"},
				{[]string{"dlq", "purge", "--queue", "nope", "--yes"}, "no dead job matches queue=nope: nothing to purge\n"},
				{[]string{"--json", "dlq", "purge", "--queue", "nope"}, `{"purged":0}` + "\n"},
				{[]string{"--json", "dlq", "redrive", "--all", "--class", "transient"},
					`{"matched":0,"redriven":0,"refused":0,"skipped":0,"done":true}` + "\n"},
			} {
				out, stderr, err := cli("", c.args...)
				if err != nil || stderr != "" || out != c.want {
					t.Errorf("%v: %v, stdout %q (want %q), stderr %q", c.args, err, out, c.want, stderr)
				}
			}
			if mode == "server" {
				// No operation was started for them.
				var ops struct {
					Operations []server.Operation `json:"operations"`
				}
				b, err := http.NewRequest("GET", target[1]+"/v1/operations", nil)
				if err != nil {
					t.Fatal(err)
				}
				b.Header.Set("Authorization", "Bearer tok")
				res, err := http.DefaultClient.Do(b)
				if err != nil {
					t.Fatal(err)
				}
				err = json.NewDecoder(res.Body).Decode(&ops)
				res.Body.Close()
				if err != nil || len(ops.Operations) != 0 {
					t.Errorf("operations after empty selections: %+v, %v", ops.Operations, err)
				}
			}

			// Answered yes: done, on exactly the jobs counted.
			out, stderr, err := cli("y\n", "dlq", "redrive", "--all", "--queue", "sms-q")
			if err != nil || !strings.Contains(out, "redriven 1 of 1 matched") {
				t.Fatalf("redrive answered y: %v, %q", err, out)
			}
			wantIn(t, stderr, "Redrive 1 dead job matching queue=sms-q? [y/N] ")
			out, stderr, err = cli("yes\n", "dlq", "purge", "--queue", "mail")
			if err != nil || out != "purged 3 dead job(s)\n" {
				t.Fatalf("purge answered yes: %v, %q", err, out)
			}
			wantIn(t, stderr, "Purge 3 dead jobs matching queue=mail? [y/N] ")
			out, _, err = cli("", "dlq", "purge", "--all")
			if err != nil || out != "the DLQ is empty: nothing to purge\n" {
				t.Errorf("purge --all of an empty DLQ: %v, %q", err, out)
			}
		})
	}
	if len(prompts["direct"]) != len(prompts["server"]) {
		t.Fatalf("prompts differ: %q and %q", prompts["direct"], prompts["server"])
	}
	for i := range prompts["direct"] {
		if prompts["direct"][i] != prompts["server"][i] {
			t.Errorf("prompt %d: %q directly, %q through the server", i, prompts["direct"][i], prompts["server"][i])
		}
	}
}

// TestConfirmationCountErrors: a count the server refuses stops the
// command before any question; a server older than the count routes gets
// a question without the count.
func TestConfirmationCountErrors(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "tok")
	mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail")
	bury(t, db, "mail")

	_, stderr, err := runCLIIn(t, "y\n", "--server", ts.URL, "--token", "wrong", "dlq", "purge", "--queue", "mail")
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(stderr, "[y/N]") {
		t.Errorf("purge with a wrong token: %v, stderr %q", err, stderr)
	}
	_, stderr, err = runCLIIn(t, "y\n", "--server", ts.URL, "--token", "tok", "dlq", "purge", "--class", "nonsense")
	if err == nil || !strings.Contains(err.Error(), "field class") || strings.Contains(stderr, "[y/N]") {
		t.Errorf("purge --class nonsense: %v, stderr %q", err, stderr)
	}
	_, stderr, err = runCLIIn(t, "y\n", "--db", db, "dlq", "redrive", "--all", "--class", "nonsense")
	if err == nil || !strings.Contains(err.Error(), "unknown class") || strings.Contains(stderr, "[y/N]") {
		t.Errorf("direct redrive --class nonsense: %v, stderr %q", err, stderr)
	}

	// An older server: no count routes (GET /v1/jobs/count is then the
	// job "count", a bad id).
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	oldClient := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	api := server.New(server.Options{Client: oldClient, Logger: log})
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/dlq/count":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no route GET /v1/dlq/count"}}`))
		case "/v1/jobs/count":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"invalid","message":"job id must be a positive integer, got \"count\"","field":"id"}}`))
		default:
			api.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() {
		old.Close()
		api.Close()
		st.Close()
	})
	runOperationsWorker(t, oldClient) // stops before the store closes
	_, stderr, err = runCLIIn(t, "n\n", "--server", old.URL, "dlq", "purge", "--queue", "mail")
	if err == nil || !strings.Contains(err.Error(), "not confirmed") || stderr != "Purge the dead jobs matching queue=mail? [y/N] " {
		t.Errorf("purge on an older server: %v, stderr %q", err, stderr)
	}
	for range 60 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "many")
	}
	out := mustCLI(t, "--server", old.URL, "jobs", "ls", "--queue", "many")
	if strings.Contains(out, "showing") || !strings.Contains(out, "more: --cursor") {
		t.Errorf("jobs ls on an older server:\n%s", out)
	}
}

// TestListSummary: a listing of more than one page says how many it shows
// of how many match, directly and through a server; --json is unchanged.
func TestListSummary(t *testing.T) {
	clearConnEnv(t)
	for name, setup := range countModes(t) {
		t.Run(name, func(t *testing.T) {
			target, db := setup(t)
			cli := func(args ...string) string {
				t.Helper()
				return mustCLI(t, append(append([]string{}, target...), args...)...)
			}
			st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			seedFinished(t, st, "big", redrive.Dead, 1234)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				mustCLI(t, "--db", db, "enqueue", "email", "--queue", "big")
			}

			out := cli("dlq", "ls", "--queue", "big")
			wantIn(t, out, "\nshowing 50 of 1,234 dead jobs\nmore: --cursor ")
			res := decode[redrive.ListResult](t, cli("--json", "dlq", "ls", "--queue", "big"))
			if len(res.Jobs) != 50 || res.Next == "" {
				t.Fatalf("dlq ls --json: %d jobs, next %q", len(res.Jobs), res.Next)
			}
			out = cli("dlq", "ls", "--queue", "big", "--limit", "1000", "--cursor", res.Next)
			wantIn(t, out, "\nshowing 1,000 more of 1,234 dead jobs\nmore: --cursor ")
			out = cli("jobs", "ls", "--queue", "big", "--limit", "10")
			wantIn(t, out, "\nshowing 10 of 1,237 jobs\nmore: --cursor ")
			out = cli("jobs", "ls", "--queue", "big", "--state", "pending", "--limit", "2")
			wantIn(t, out, "\nshowing 2 of 3 jobs\nmore: --cursor ")
			out = cli("jobs", "ls", "--queue", "big", "--state", "pending")
			if strings.Contains(out, "showing") || strings.Contains(out, "more:") || strings.Count(out, "\n") != 4 {
				t.Errorf("one page says no count:\n%s", out)
			}

			// --json is one JSON object with jobs and next, and nothing else.
			raw := cli("--json", "jobs", "ls", "--queue", "big", "--limit", "2")
			var keys map[string]json.RawMessage
			if err := json.Unmarshal([]byte(raw), &keys); err != nil || len(keys) != 2 || keys["jobs"] == nil || keys["next"] == nil {
				t.Errorf("jobs ls --json: %v %s", err, raw)
			}
			if strings.Count(raw, "\n") != 1 {
				t.Errorf("jobs ls --json prints more than one line: %q", raw)
			}
		})
	}
}
