package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func countDraws(s string) int            { return strings.Count(s, "\r") }
func lastDraw(s string) string           { i := strings.LastIndex(s, "\r"); return s[i+1:] }
func stripClear(s string) string         { return strings.ReplaceAll(s, "\x1b[K", "") }
func fields(s string) string             { return strings.Join(strings.Fields(s), " ") }
func wantIn(t *testing.T, s string, w ...string) {
	t.Helper()
	for _, x := range w {
		if !strings.Contains(s, x) {
			t.Errorf("%q lacks %q", s, x)
		}
	}
}

func TestProgressBarTTY(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	b := newBar(&buf, barTTY, "redrive", c.now)
	b.update(0, 1000, "refused 0, skipped 0")
	if countDraws(buf.String()) != 1 {
		t.Fatalf("the first update is drawn at once: %q", buf.String())
	}
	wantIn(t, stripClear(buf.String()), "\rredrive  [>", "  0%", "0/1000", "0.0s", "refused 0, skipped 0")
	// Updates closer than ttyEvery are not drawn.
	c.add(10 * time.Millisecond)
	b.update(10, 1000, "")
	if countDraws(buf.String()) != 1 {
		t.Fatalf("an update 10ms later was drawn: %q", buf.String())
	}
	c.add(2 * time.Second)
	b.update(500, 1000, "refused 3, skipped 1")
	line := lastDraw(buf.String())
	if !strings.HasSuffix(line, "\x1b[K") {
		t.Errorf("a redraw does not clear the rest of the line: %q", line)
	}
	wantIn(t, stripClear(line), "redrive  [============>           ]   50%  500/1000  249/s  eta 2.0s  refused 3, skipped 1")
	// finish draws the last state and ends the line.
	c.add(time.Millisecond)
	b.update(1000, 1000, "refused 3, skipped 1")
	b.finish()
	out := buf.String()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("finish: %q", out)
	}
	wantIn(t, stripClear(lastDraw(out)), "[========================]  100%  1000/1000")
	if strings.Contains(lastDraw(out), "eta") {
		t.Errorf("eta at the end: %q", lastDraw(out))
	}
}

func TestProgressBarUnknownAndGrowingTotal(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	b := newBar(&buf, barTTY, "export", c.now)
	c.add(3 * time.Second)
	b.update(42, -1, "")
	line := fields(stripClear(lastDraw(buf.String())))
	if strings.Contains(line, "[") || strings.Contains(line, "%") || !strings.Contains(line, "export 42 14/s 3.0s") {
		t.Errorf("unknown total: %q", line)
	}
	// More done than matched (jobs died meanwhile): full, not beyond.
	buf.Reset()
	b = newBar(&buf, barTTY, "purge", c.now)
	b.update(12, 10, "")
	wantIn(t, stripClear(lastDraw(buf.String())), "[========================]  100%  12/12")
	// An empty selection is complete.
	buf.Reset()
	b = newBar(&buf, barTTY, "purge", c.now)
	b.update(0, 0, "")
	wantIn(t, lastDraw(buf.String()), "100%", "0/0")
}

func TestProgressBarPlainAndOff(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	b := newBar(&buf, barPlain, "redrive", c.now)
	b.update(1, 10, "refused 0, skipped 0")
	c.add(time.Second)
	b.update(2, 10, "refused 0, skipped 0")
	if buf.Len() != 0 {
		t.Fatalf("plain mode wrote within its first period: %q", buf.String())
	}
	c.add(plainEvery)
	b.update(5, 10, "refused 1, skipped 0")
	c.add(time.Second)
	b.update(6, 10, "refused 1, skipped 0")
	b.finish()
	out := buf.String()
	if strings.ContainsAny(out, "\r\x1b") || strings.Count(out, "\n") != 1 {
		t.Fatalf("plain output: %q", out)
	}
	if want := "redrive: 5/10 (50%), 0.8/s, eta 6.0s, refused 1, skipped 0\n"; out != want {
		t.Fatalf("plain line %q, want %q", out, want)
	}
	c.add(plainEvery)
	b.update(7, -1, "")
	if !strings.HasSuffix(buf.String(), "redrive: 7, 0.6/s, 12s\n") {
		t.Fatalf("plain line without a total: %q", buf.String())
	}

	buf.Reset()
	b = newBar(&buf, barOff, "redrive", c.now)
	b.update(1, 2, "x")
	c.add(time.Hour)
	b.update(2, 2, "x")
	b.finish()
	if buf.Len() != 0 {
		t.Fatalf("off mode wrote %q", buf.String())
	}
}

func TestFmtDurationAndRate(t *testing.T) {
	for d, want := range map[time.Duration]string{
		400 * time.Millisecond: "0.4s", 12 * time.Second: "12s", 185 * time.Second: "3m05s", 130 * time.Minute: "2h10m",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%s) = %q, want %q", d, got, want)
		}
	}
	for r, want := range map[float64]string{0.1: "0.1/s", 35: "35/s", 1234: "1.2k/s", 34000: "34k/s"} {
		if got := fmtRate(r); got != want {
			t.Errorf("fmtRate(%g) = %q, want %q", r, got, want)
		}
	}
}

// forceTerminal makes the CLI take standard error for a terminal.
func forceTerminal(t *testing.T) {
	t.Helper()
	old := stderrIsTerminal
	stderrIsTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { stderrIsTerminal = old })
}

// TestBulkProgressBars runs redrive, purge and export with a terminal on
// standard error, directly and through a server: each draws its bar on
// standard error, and standard output holds only the result (pure JSON
// with --json).
func TestBulkProgressBars(t *testing.T) {
	clearConnEnv(t)
	forceTerminal(t)
	ts, db := newTestServer(t, "tok")
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"direct", []string{"--db", db}},
		{"server", []string{"--server", ts.URL, "--token", "tok"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cli := func(args ...string) (string, string) {
				t.Helper()
				out, stderr, err := runCLI(t, append(append([]string{}, mode.args...), args...)...)
				if err != nil {
					t.Fatalf("redrive %s: %v\n%s", strings.Join(args, " "), err, stderr)
				}
				return out, stderr
			}
			for range 3 {
				mustCLI(t, "--db", db, "enqueue", "email", "--queue", "bars")
			}
			bury(t, db, "bars")

			// Export, as text.
			dir := filepath.Join(t.TempDir(), "x")
			out, stderr := cli("dlq", "export", dir, "--queue", "bars")
			if out != fmt.Sprintf("exported 3 dead job(s) to %s\n", dir) {
				t.Errorf("export stdout %q", out)
			}
			wantIn(t, stderr, "\rexport  [========================]  100%  3/3")
			if !strings.HasSuffix(stderr, "\n") {
				t.Errorf("export bar not ended: %q", stderr)
			}

			// Redrive, as JSON: standard output is exactly one JSON value.
			out, stderr = cli("--json", "dlq", "redrive", "--all", "--queue", "bars", "--yes")
			var prog redrive.RedriveProgress
			if err := json.Unmarshal([]byte(out), &prog); err != nil || prog.Redriven != 3 || prog.Matched != 3 || !prog.Done {
				t.Errorf("redrive --json stdout %q: %+v %v", out, prog, err)
			}
			wantIn(t, stderr, "redrive  [========================]  100%  3/3", "refused 0, skipped 0")

			// Purge.
			bury(t, db, "bars")
			out, stderr = cli("dlq", "purge", "--queue", "bars", "--yes")
			if out != "purged 3 dead job(s)\n" {
				t.Errorf("purge stdout %q", out)
			}
			wantIn(t, stderr, "purge  [========================]  100%  3/3")
		})
	}
}

// TestNoBarWithoutTerminal: with --json and no terminal, standard error
// stays empty; without --json, a short operation prints no plain line.
func TestNoBarWithoutTerminal(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "k", "--queue", "q")
	bury(t, db, "q")
	out, stderr, err := runCLI(t, "--db", db, "--json", "dlq", "export", t.TempDir())
	if err != nil || stderr != "" || !json.Valid([]byte(out)) {
		t.Fatalf("export --json: %v, stdout %q, stderr %q", err, out, stderr)
	}
	out, stderr, err = runCLI(t, "--db", db, "dlq", "purge", "--all", "--yes")
	if err != nil || stderr != "" || out != "purged 1 dead job(s)\n" {
		t.Fatalf("purge: %v, stdout %q, stderr %q", err, out, stderr)
	}
}

// TestExportServerSameFolders: export --server (NDJSON) writes the same
// files as the direct export of the same database.
func TestExportServerSameFolders(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "")
	for i := range 5 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "ex", "--payload", fmt.Sprintf(`{"n":%d,"to":"x@example.com"}`, i), "--key", strconv.Itoa(i))
	}
	mustCLI(t, "--db", db, "enqueue", "sms", "--queue", "other")
	bury(t, db, "ex")
	bury(t, db, "other")
	direct, viaServer := filepath.Join(t.TempDir(), "d"), filepath.Join(t.TempDir(), "s")
	mustCLI(t, "--db", db, "dlq", "export", direct, "--kind", "email")
	out := mustCLI(t, "--server", ts.URL, "dlq", "export", viaServer, "--kind", "email")
	if !strings.Contains(out, "exported 5 dead job(s)") {
		t.Fatalf("export --server: %q", out)
	}
	a, b := readTree(t, direct), readTree(t, viaServer)
	if len(a) != 15 || len(b) != len(a) {
		t.Fatalf("%d files direct, %d via the server", len(a), len(b))
	}
	for name, content := range a {
		if b[name] != content {
			t.Errorf("%s differs:\ndirect: %s\nserver: %s", name, content, b[name])
		}
	}
	// A bad filter is the server's 400, and nothing is written.
	empty := filepath.Join(t.TempDir(), "e")
	if _, stderr, err := runCLI(t, "--server", ts.URL, "dlq", "export", empty, "--class", "nope"); err == nil || !strings.Contains(stderr, "field class") {
		t.Fatalf("export --class nope: %v %q", err, stderr)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("a refused export wrote %d entries", len(entries))
	}
}

// readTree reads every file under dir, by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deadIDs lists the dead jobs of queue, directly.
func deadIDs(t *testing.T, db, queue string) []int64 {
	t.Helper()
	res := decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "dlq", "ls", "--queue", queue))
	var ids []int64
	for _, j := range res.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// runCLICtx runs the command line on ctx, as main does with the signal
// context that Ctrl-C cancels.
func runCLICtx(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestCtrlCCancelsServerOperation: Ctrl-C during dlq redrive --server
// cancels the operation on the server; what was redriven stays redriven.
func TestCtrlCCancelsServerOperation(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "tok")
	for range 3 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "slow")
	}
	bury(t, db, "slow")
	ids := deadIDs(t, db, "slow")
	args := []string{"--server", ts.URL, "--token", "tok", "dlq", "redrive", "--rate", "0.1"}
	for _, id := range ids {
		args = append(args, strconv.FormatInt(id, 10))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		out, stderr string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, stderr, err := runCLICtx(ctx, args...)
		done <- result{out, stderr, err}
	}()
	// Wait until the server's operation has redriven its first job (the
	// next is 10 s away), then press Ctrl-C.
	var op server.Operation
	waitUntil(t, e2eWait, "one operation under way, one job processed", func() error {
		var l struct {
			Operations []server.Operation `json:"operations"`
		}
		getJSON(t, ts.URL+"/v1/operations", "tok", &l)
		if len(l.Operations) == 1 && l.Operations[0].Processed == 1 {
			op = l.Operations[0]
			return nil
		}
		return fmt.Errorf("operations %+v", l.Operations)
	})
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the CLI did not stop after Ctrl-C")
	}
	if r.err == nil || r.out != "" {
		t.Fatalf("after Ctrl-C: err %v, stdout %q", r.err, r.out)
	}
	wantIn(t, r.stderr, "redrive stopped after redriving 1 of 3", "context canceled", "operation "+op.ID+" canceled on the server")
	var ob struct {
		Operation server.Operation `json:"operation"`
	}
	getJSON(t, ts.URL+"/v1/operations/"+op.ID, "tok", &ob)
	if ob.Operation.State != server.OperationCanceled || ob.Operation.Redriven != 1 {
		t.Fatalf("server operation after Ctrl-C: %+v", ob.Operation)
	}
	if left := deadIDs(t, db, "slow"); len(left) != 2 {
		t.Fatalf("%d dead jobs left, want 2", len(left))
	}
}

// TestCtrlCDirect: Ctrl-C during a direct redrive stops it between jobs;
// the CLI reports what it did.
func TestCtrlCDirect(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	for range 3 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "slow")
	}
	bury(t, db, "slow")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var stderr string
	go func() {
		var err error
		_, stderr, err = runCLICtx(ctx, "--db", db, "dlq", "redrive", "--all", "--queue", "slow", "--rate", "0.1", "--yes")
		done <- err
	}()
	waitUntil(t, e2eWait, "the first job was redriven (2 left in the DLQ)", func() error {
		if ids := deadIDs(t, db, "slow"); len(ids) != 2 {
			return fmt.Errorf("%d in the DLQ", len(ids))
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("no error after Ctrl-C")
		}
		wantIn(t, stderr, "redrive stopped after redriving 1 of 3", "context canceled")
	case <-time.After(20 * time.Second):
		t.Fatal("the CLI did not stop after Ctrl-C")
	}
	if left := deadIDs(t, db, "slow"); len(left) != 2 {
		t.Fatalf("%d dead jobs left, want 2", len(left))
	}
}

// TestServerOperationLimit: the server's 429 (every operation slot taken)
// is the CLI's error.
func TestServerOperationLimit(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "")
	// Two dead jobs: the slow redrives take the first at once, and the
	// purge still has the second to purge (an empty selection would not
	// reach the server).
	mustCLI(t, "--db", db, "enqueue", "k", "--queue", "z")
	mustCLI(t, "--db", db, "enqueue", "k", "--queue", "z")
	bury(t, db, "z")
	// Fill the server's operation slots with slow redrives.
	ids := deadIDs(t, db, "z")
	for range server.DefaultMaxOperations {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/dlq/redrive", strings.NewReader(fmt.Sprintf(`{"ids":[%d,999999],"rate":0.1}`, ids[0])))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 202 {
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	_, stderr, err := runCLI(t, "--server", ts.URL, "dlq", "purge", "--all", "--yes")
	if err == nil {
		t.Fatal("purge with every slot taken succeeded")
	}
	wantIn(t, stderr, "429", "too_many_operations")
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
