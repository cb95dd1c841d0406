package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestErrorSaysRedriveOnce: an engine error, which says "redrive: "
// itself, is printed with the prefix once, not "redrive: redrive:
// enqueue: ...".
func TestErrorSaysRedriveOnce(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	_, stderr, err := runCLI(t, "--db", db, "enqueue", "http", "--payload", `{}`)
	if err == nil {
		t.Fatal("an http job without a url was enqueued")
	}
	if strings.Contains(stderr, "redrive: redrive:") || !strings.HasPrefix(stderr, "redrive: enqueue: ") {
		t.Errorf("stderr: %q", stderr)
	}
}

// TestDurationFlagsTakeDays: --for and --delay take days as --since does
// (--for 400d was "unknown unit d"); out of range, the error says the
// bound in days.
func TestDurationFlagsTakeDays(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email") // creates the database
	if out := mustCLI(t, "--db", db, "breakers", "open", "payments", "--for", "30d"); !strings.Contains(out, "forced open until ") {
		t.Errorf("--for 30d: %q", out)
	}
	_, _, err := runCLI(t, "--db", db, "breakers", "open", "payments", "--for", "400d")
	if err == nil || !strings.Contains(err.Error(), "--for is 400d; it must be positive and at most 366d") {
		t.Errorf("--for 400d: %v", err)
	}
	if out := mustCLI(t, "--db", db, "enqueue", "email", "--delay", "2d"); !strings.Contains(out, "scheduled") {
		t.Errorf("--delay 2d: %q", out)
	}
	_, _, err = runCLI(t, "--db", db, "enqueue", "email", "--delay", "2x")
	if err == nil || !strings.Contains(err.Error(), "7d") {
		t.Errorf("--delay 2x: %v", err)
	}
}

// doneBackend is a backend whose jobs are enqueued already ended, in
// state.
type doneBackend struct {
	backend
	state redrive.State
	jobs  map[int64]*redrive.Job
}

func (b *doneBackend) EnqueueBatch(_ context.Context, reqs []apiclient.EnqueueRequest) ([]*redrive.Job, error) {
	var out []*redrive.Job
	for _, r := range reqs {
		j := &redrive.Job{ID: int64(len(b.jobs) + 1), Kind: r.Kind, Payload: r.Payload, State: b.state}
		b.jobs[j.ID] = j
		out = append(out, j)
	}
	return out, nil
}

func (b *doneBackend) Get(_ context.Context, id int64) (*redrive.Job, error) { return b.jobs[id], nil }

// TestDownloadSummarySingular: one download is "1 download completed"
// (it was "1 downloads completed"), and "1 download failed:".
func TestDownloadSummarySingular(t *testing.T) {
	for state, want := range map[redrive.State]string{redrive.Completed: "1 download completed\n", redrive.Dead: "1 download failed:\n"} {
		cmd := &cobra.Command{}
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&strings.Builder{})
		reqs, err := downloadRequests(cmd, []string{"https://example.com/a.csv"}, downloadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := &doneBackend{state: state, jobs: map[int64]*redrive.Job{}}
		_ = runDownload(t.Context(), cmd, &globalOptions{}, b, reqs, true)
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s: output %q lacks %q", state, out.String(), want)
		}
	}
}
