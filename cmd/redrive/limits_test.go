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
	// Rates: set with a burst, listed, refused with the field named,
	// removed; the max stays.
	if out := cli("limits", "set", "per-customer", "--rate", "50/s", "--burst", "10"); !strings.Contains(out, "50/s") || !strings.Contains(out, "10") {
		t.Errorf("limits set --rate 50/s --burst 10: %q", out)
	}
	if out := cli("limits", "set", "pay", "--rate", "3/1m"); !strings.Contains(out, "3/m") {
		t.Errorf("limits set pay --rate 3/1m: %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "x", "--rate", "0/s"}, "count"},
		{[]string{"limits", "set", "x", "--rate", "5/25h"}, "interval"},
		{[]string{"limits", "set", "x", "--rate", "5/s", "--burst", "0"}, "burst"},
		{[]string{"limits", "set", "x", "--burst", "3"}, "--burst"},
		{[]string{"limits", "set", "x"}, "MAX"},
	} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v %q, want a refusal naming %s", c.args, err, stderr, c.want)
		}
	}
	list = decode[server.LimitList](t, cli("--json", "limits", "ls"))
	if len(list.Limits) != 2 || list.Limits[1].Name != "per-customer" || list.Limits[1].Max != 4 || list.Limits[1].Rate == nil ||
		list.Limits[1].Rate.N != 50 || list.Limits[1].Rate.Burst != 10 || list.Limits[0].Max != 0 || list.Limits[0].Rate == nil {
		t.Errorf("limits ls --json after rates = %+v", list)
	}
	if out := cli("limits", "ls"); !strings.Contains(out, "RATE") || !strings.Contains(out, "3/m") || !strings.Contains(out, "THROTTLED") {
		t.Errorf("limits ls: %q", out)
	}
	cli("limits", "set", "per-customer", "--rate", "none")
	list = decode[server.LimitList](t, cli("--json", "limits", "ls"))
	if len(list.Limits) != 2 || list.Limits[1].Rate != nil || list.Limits[1].Max != 4 {
		t.Errorf("after --rate none: %+v", list)
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
