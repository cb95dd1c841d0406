package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// buryMany enqueues n jobs in queue and moves them to the DLQ with the
// store, as a worker would, without running handlers.
func buryMany(t *testing.T, e *env, queue string, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for len(ids) < n {
		reqs := make([]redrive.Request, min(n-len(ids), redrive.MaxBatch))
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "k", Queue: queue, Payload: map[string]int{"i": len(ids) + i}}
		}
		jobs, err := e.client.EnqueueMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		got, err := e.store.Fetch(ctx, store.FetchParams{Queue: queue, Limit: len(reqs), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "t"})
		if err != nil || len(got) != len(reqs) {
			t.Fatalf("fetch: %d jobs, %v", len(got), err)
		}
		outs := make([]store.Outcome, len(got))
		for i, j := range got {
			outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "t", Kind: store.Bury, At: now,
				Class: failure.Permanent, DeadReason: "permanent", Fingerprint: "fp", Error: "boom",
				Event: &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: now, Class: "permanent", Error: "boom"}}
		}
		if _, err := e.store.Finish(ctx, outs); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

func TestPurgeProgress(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	buryMany(t, e, "p", 2300)
	keep := buryMany(t, e, "other", 3)
	var calls []int64
	n, err := e.client.Purge(ctx, redrive.Filter{Queue: "p"}, func(purged int64) { calls = append(calls, purged) })
	if err != nil || n != 2300 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	// One call per batch of 1000, with the running total.
	if len(calls) != 3 || calls[0] != 1000 || calls[1] != 2000 || calls[2] != 2300 {
		t.Fatalf("progress calls %v", calls)
	}
	if c, _ := e.client.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}}); c != int64(len(keep)) {
		t.Fatalf("%d dead jobs left, want %d", c, len(keep))
	}
	// An empty purge reports once, with zero.
	calls = nil
	if n, err := e.client.Purge(ctx, redrive.Filter{Queue: "p"}, func(p int64) { calls = append(calls, p) }); err != nil || n != 0 || len(calls) != 1 || calls[0] != 0 {
		t.Fatalf("empty purge: %d %v, calls %v", n, err, calls)
	}
	// A canceled context stops the purge; nothing is lost.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.client.Purge(cctx, redrive.Filter{Queue: "other"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("purge on a canceled context: %v", err)
	}
	if c, _ := e.client.Count(ctx, redrive.Filter{Queue: "other", States: []redrive.State{redrive.Dead}}); c != 3 {
		t.Fatalf("canceled purge deleted jobs: %d left", c)
	}
}

func TestRedriveProgressStartsWithMatched(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	buryMany(t, e, "r", 3)
	var calls []redrive.RedriveProgress
	prog, err := e.client.Redrive(ctx, redrive.RedriveRequest{Filter: redrive.Filter{Queue: "r"},
		Progress: func(p redrive.RedriveProgress) { calls = append(calls, p) }})
	if err != nil || prog.Redriven != 3 || !prog.Done {
		t.Fatalf("redrive: %+v %v", prog, err)
	}
	if len(calls) < 3 || calls[0].Matched != 3 || calls[0].Redriven != 0 || calls[0].Done || !calls[len(calls)-1].Done {
		t.Fatalf("progress calls %+v", calls)
	}
}

func TestValidateRedrive(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger(), MaxPayload: 8})
	for _, r := range []redrive.RedriveRequest{
		{IDs: []int64{1}, Rate: -1},
		{IDs: []int64{1}, Payload: "a payload longer than eight bytes"},
	} {
		if err := c.ValidateRedrive(r); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("ValidateRedrive(%+v) = %v, want ErrInvalid", r, err)
		}
		if _, err := c.Redrive(context.Background(), r); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("Redrive(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if err := c.ValidateRedrive(redrive.RedriveRequest{IDs: []int64{1}, Payload: 1, Rate: 5}); err != nil {
		t.Errorf("valid request refused: %v", err)
	}
	if err := c.ValidateRedrive(redrive.RedriveRequest{IDs: []int64{1}, Payload: func() {}}); err == nil {
		t.Error("an unencodable payload passed")
	}
}

// TestExportedFiles checks that ExportJob writes what ExportedFiles
// returns, so the API's NDJSON export and the folder export agree.
func TestExportedFiles(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	id := buryMany(t, e, "x", 1)[0]
	j, err := e.client.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := redrive.ExportJob(dir, j); err != nil {
		t.Fatal(err)
	}
	wantErr, wantMeta := redrive.ExportedFiles(j)
	var gotErr redrive.ExportedError
	var gotMeta redrive.ExportedMetadata
	for name, v := range map[string]any{"error.json": &gotErr, "metadata.json": &gotMeta} {
		b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(id, 10), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := json.Marshal(wantErr)
	b, _ := json.Marshal(gotErr)
	if string(a) != string(b) || gotErr.JobID != id || gotErr.Fingerprint != "fp" || len(gotErr.History) != 1 {
		t.Errorf("error.json %s, ExportedFiles %s", b, a)
	}
	a, _ = json.Marshal(wantMeta)
	b, _ = json.Marshal(gotMeta)
	if string(a) != string(b) || gotMeta.Queue != "x" {
		t.Errorf("metadata.json %s, ExportedFiles %s", b, a)
	}
}
