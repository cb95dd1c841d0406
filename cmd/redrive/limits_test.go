package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// checkLimitsCLI runs the limits commands through pre (the connection
// flags) and checks their output.
func checkLimitsCLI(t *testing.T, pre []string) {
	t.Helper()
	cli := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{}, pre...), args...)...)
	}
	if out := cli("limits", "ls"); out != "no concurrency limits\n" {
		t.Errorf("limits ls on an empty store: %q", out)
	}
	if out := cli("limits", "set", "per-customer", "4"); !strings.Contains(out, "per-customer") || !strings.Contains(out, "4") {
		t.Errorf("limits set: %q", out)
	}
	list := decode[server.LimitList](t, cli("--json", "limits", "ls"))
	if len(list.Limits) != 1 || list.Limits[0].Name != "per-customer" || list.Limits[0].Max != 4 {
		t.Errorf("limits ls --json = %+v", list)
	}
	for _, bad := range [][]string{{"limits", "set", "x", "0"}, {"limits", "set", "--", "x", "-1"}, {"limits", "set", "x", "many"}} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), bad...)...)
		if err == nil || !strings.Contains(stderr, "MAX") {
			t.Errorf("%v: %v %q, want a refusal naming MAX", bad, err, stderr)
		}
	}
	_, stderr, err := runCLI(t, append(append([]string{}, pre...), "limits", "set", "a/b", "2")...)
	if err == nil || !strings.Contains(stderr, "name") {
		t.Errorf("limits set of a bad name: %v %q", err, stderr)
	}
	list = decode[server.LimitList](t, cli("--json", "limits", "ls"))
	if len(list.Limits) != 1 {
		t.Errorf("after refusals: %+v, want the one limit", list)
	}
}

func TestLimitsDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "redrive.db")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	checkLimitsCLI(t, []string{"--db", db})
}

func TestLimitsServerMode(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "s3cret")
	checkLimitsCLI(t, []string{"--server", ts.URL, "--token", "s3cret"})
}
