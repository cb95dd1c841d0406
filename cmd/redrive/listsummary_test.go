package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestJobsListSummary: jobs ls shows what each job is (an http job's
// method and URL without its query, a payload excerpt without secrets),
// directly on the store and through a server, and --json gives the
// listing without histories.
func TestJobsListSummary(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "")
	db := filepath.Join(t.TempDir(), "r.db")
	for _, conn := range [][]string{{"--db", db}, {"--server", ts.URL}} {
		mustCLI(t, append(conn, "enqueue", "http", "--payload", `{"method":"PUT","url":"https://example.com/a/b?token=zz"}`)...)
		mustCLI(t, append(conn, "enqueue", "email", "--payload", `{"to":"a@example.com","api_key":"zz"}`)...)
		out := mustCLI(t, append(conn, "jobs", "ls")...)
		for _, want := range []string{"SUMMARY", "PUT https://example.com/a/b?***", `{"to":"a@example.com","api_key":"***"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("%v jobs ls does not show %q:\n%s", conn, want, out)
			}
		}
		if strings.Contains(out, "zz") {
			t.Errorf("%v jobs ls shows a secret:\n%s", conn, out)
		}
		js := mustCLI(t, append(conn, "--json", "jobs", "ls")...)
		var page struct {
			Jobs []map[string]json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(js), &page); err != nil || len(page.Jobs) != 2 {
			t.Fatalf("%v --json jobs ls: %v: %s", conn, err, js)
		}
		for _, j := range page.Jobs {
			if j["history"] != nil || j["summary"] == nil {
				t.Errorf("%v --json jobs ls: a job with history %s, summary %s", conn, j["history"], j["summary"])
			}
		}
	}
}
