package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// checkBreakersCLI runs the breakers commands through pre (the connection
// flags) and checks their output.
func checkBreakersCLI(t *testing.T, pre []string) {
	t.Helper()
	cli := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{}, pre...), args...)...)
	}
	if out := cli("breakers", "ls"); out != "No circuit breaker has been used yet.\n" {
		t.Errorf("breakers ls on an empty store: %q", out)
	}
	out := cli("breakers", "open", "payments", "--for", "15m")
	if !strings.Contains(out, "breaker payments forced open until ") {
		t.Errorf("breakers open --for: %q", out)
	}
	out = cli("breakers", "open", "search api")
	if !strings.Contains(out, "until `redrive breakers close 'search api'`") {
		t.Errorf("breakers open: %q", out)
	}
	v := decode[server.BreakerBody](t, cli("--json", "breakers", "close", "payments")).Breaker
	if v.Name != "payments" || v.State.String() != "closed" || v.Trips != 1 || !strings.HasPrefix(v.OpenedBy, "operator") {
		t.Errorf("breakers close --json: %+v", v)
	}
	out = cli("breakers", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "BREAKER") || !strings.HasPrefix(lines[1], "payments") ||
		!strings.Contains(lines[1], "closed") || !strings.HasPrefix(lines[2], "search api") ||
		!strings.Contains(lines[2], "open (forced)") || !strings.Contains(lines[2], "when closed") {
		t.Errorf("breakers ls:\n%s", out)
	}
	list := decode[[]server.BreakerView](t, cli("--json", "breakers", "ls"))
	if len(list) != 2 || !list[1].Forced || !list[1].Shared {
		t.Errorf("breakers ls --json: %+v", list)
	}
	// Bad input names what is wrong.
	for _, args := range [][]string{
		{"breakers", "open", ""},
		{"breakers", "open", "x", "--for", "-1m"},
		{"breakers", "close", strings.Repeat("n", 201)},
		// The name rule: nothing invisible or path-like.
		{"breakers", "open", ".."},
		{"breakers", "open", "a/../b"},
		{"breakers", "open", "x\u200d"},
	} {
		if _, stderr, err := runCLI(t, append(append([]string{}, pre...), args...)...); err == nil {
			t.Errorf("%q succeeded: %s", args, stderr)
		}
	}
	// Closing a breaker nobody has is refused, and creates nothing.
	_, _, err := runCLI(t, append(append([]string{}, pre...), "breakers", "close", "nobody")...)
	if err == nil || !strings.Contains(err.Error(), `no breaker named "nobody"`) {
		t.Errorf("breakers close nobody: %v", err)
	}
	if list := decode[[]server.BreakerView](t, cli("--json", "breakers", "ls")); len(list) != 2 {
		t.Errorf("breakers ls --json after closing an unknown breaker: %+v", list)
	}
	// Deleting: none, in use (closed just now), forced open (deletable),
	// in use with --force.
	_, _, err = runCLI(t, append(append([]string{}, pre...), "breakers", "rm", "nobody")...)
	if err == nil || !strings.Contains(err.Error(), `no breaker named "nobody"`) {
		t.Errorf("breakers rm nobody: %v", err)
	}
	_, _, err = runCLI(t, append(append([]string{}, pre...), "breakers", "rm", "payments")...)
	if err == nil || !strings.Contains(err.Error(), `breaker "payments" is in use: closed, but closed at`) || !strings.Contains(err.Error(), "force") {
		t.Errorf("breakers rm of a breaker closed just now: %v", err)
	}
	if out := cli("breakers", "rm", "search api"); out != "breaker search api deleted\n" {
		t.Errorf("breakers rm of a breaker forced open: %q", out)
	}
	if out := cli("--json", "breakers", "rm", "--force", "payments"); strings.TrimSpace(out) != `{"deleted":"payments"}` {
		t.Errorf("breakers rm --force --json: %q", out)
	}
	if out := cli("breakers", "ls"); out != "No circuit breaker has been used yet.\n" {
		t.Errorf("breakers ls after deleting both: %q", out)
	}
	if _, stderr, err := runCLI(t, append(append([]string{}, pre...), "breakers", "rm", "")...); err == nil {
		t.Errorf("breakers rm with an empty name succeeded: %s", stderr)
	}
}

func TestBreakersDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	checkBreakersCLI(t, []string{"--db", db})
}

func TestBreakersServerMode(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "s3cret")
	checkBreakersCLI(t, []string{"--server", ts.URL, "--token", "s3cret"})
}
