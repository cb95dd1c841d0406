package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
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
	// A new rate without --burst keeps the burst; MAX none removes the
	// cap of a limit that keeps a rate, and a limit cannot lose both.
	cli("limits", "set", "per-customer", "--rate", "20/s")
	l := decode[server.LimitBody](t, cli("--json", "limits", "set", "per-customer", "none")).Limit
	if l.Max != 0 || l.Rate == nil || l.Rate.N != 20 || l.Rate.Burst != 10 {
		t.Errorf("after --rate 20/s and MAX none: %+v (rate %v), want no max, 20/s burst 10", l, l.Rate)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "per-customer", "--rate", "none"}, "max"},
		{[]string{"limits", "set", "per-customer", "none", "--rate", "none"}, "no limit"},
		{[]string{"limits", "set", "x", "--hold", "maybe"}, "--hold"},
	} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v %q, want a refusal naming %s", c.args, err, stderr, c.want)
		}
	}
	if out := cli("limits", "set", "per-customer", "4", "--hold", "on"); !strings.Contains(out, "HOLD") || !strings.Contains(out, " on ") {
		t.Errorf("limits set --hold on: %q", out)
	}
	l = decode[server.LimitBody](t, cli("--json", "limits", "set", "per-customer", "--hold", "off")).Limit
	if l.HoldOnRetryAfter || l.Max != 4 {
		t.Errorf("limits set --hold off: %+v", l)
	}
	cli("limits", "set", "per-customer", "--rate", "none")
	list = decode[server.LimitList](t, cli("--json", "limits", "ls"))
	if len(list.Limits) != 2 || list.Limits[1].Rate != nil || list.Limits[1].Max != 4 {
		t.Errorf("after --rate none: %+v", list)
	}
}

func TestLimitsDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
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

// TestServeLimitsConfigured: a serve started with concurrency limits
// lists them from the start, with nothing in use, before any job used
// them; `jobs show` of a job waiting on one says so.
func TestServeLimitsConfigured(t *testing.T) {
	clearConnEnv(t)
	const token = "s3cret"
	base, _ := startServe(t, "--token", token, "--queues", "idle",
		"--concurrency-limits", `[{"name":"per-customer","queue":"crm","key":"payload.customer","max":1}]`)
	code, body := call(t, "GET", base+"/v1/limits", token, "")
	list := decode[server.LimitList](t, string(body))
	if code != 200 || len(list.Limits) != 1 || list.Limits[0].Name != "per-customer" || list.Limits[0].Max != 1 ||
		list.Limits[0].InUse != 0 || !list.Limits[0].Configured || list.Limits[0].Key != "payload.customer" {
		t.Fatalf("GET /v1/limits of a fresh serve = %d %s, want per-customer, max 1, configured", code, body)
	}
	pre := []string{"--server", base, "--token", token}
	if out := mustCLI(t, append(pre, "limits", "ls")...); !strings.Contains(out, "per-customer") || !strings.Contains(out, "queue=crm key=payload.customer") {
		t.Errorf("limits ls of a fresh serve: %q", out)
	}
	// No worker serves queue crm: a job due there is under the limit, not
	// waiting on it (its group has a free slot).
	code, body = call(t, "POST", base+"/v1/jobs", token, `{"queue":"crm","kind":"call","payload":{"customer":"c1"}}`)
	if code != 201 {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	j := decode[struct{ ID int64 }](t, string(body))
	if out := mustCLI(t, append(pre, "jobs", "show", strconv.FormatInt(j.ID, 10))...); !strings.Contains(out, "under limit per-customer (group c1: 0 of 1 running)") {
		t.Errorf("jobs show: %q, want its limit", out)
	}
}

// TestLimitLine: the words of `jobs show` for a job under a limit.
func TestLimitLine(t *testing.T) {
	for _, c := range []struct {
		l    store.JobLimit
		want string
	}{
		{store.JobLimit{Name: "per-host", Key: "example.com", Max: 5, Running: 5, Waiting: true}, "waiting on limit per-host (group example.com: 5 of 5 running)"},
		{store.JobLimit{Name: "mail", Max: 2, Running: 1}, "under limit mail (1 of 2 running)"},
	} {
		if got := limitLine(&redrive.Job{Limit: &c.l}); got != c.want {
			t.Errorf("limitLine(%+v) = %q, want %q", c.l, got, c.want)
		}
	}
}
