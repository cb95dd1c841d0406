package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store/sqlite"
)

// A replay enqueues again, as new jobs, the completed jobs of one
// customer: each new job names the job it replays.
func ExampleClient_StartOperation() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "redrive-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})

	type Doc struct {
		CustomerID int `json:"customer_id"`
		Doc        int `json:"doc"`
	}
	for i := range 3 {
		client.Enqueue(ctx, "index", Doc{CustomerID: 42, Doc: i})
	}
	client.Enqueue(ctx, "index", Doc{CustomerID: 7, Doc: 9})

	op, err := client.StartOperation(ctx, redrive.OperationRequest{
		Kind:   redrive.OperationReplay,
		Filter: redrive.Filter{Kind: "index", PayloadField: "customer_id", PayloadValue: json.RawMessage(`42`)},
		Batch:  2,   // jobs per transaction (default 100)
		Rate:   500, // jobs per second at most
		Note:   "schema v2",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(op.Kind, op.State)
	// A worker holding leadership would run it; run it here instead.
	op, err = client.RunOperation(ctx, op.ID, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(op.State, "matched", op.Progress.Matched, "replayed", op.Progress.Replayed)
	copies, _ := client.List(ctx, redrive.Filter{Kind: "index"}, redrive.Page{Limit: 10})
	for _, j := range copies.Jobs {
		if j.ReplayOf != 0 {
			fmt.Println("job", j.ID, "replays job", j.ReplayOf, "-", j.History[0].Kind, j.History[0].Note)
		}
	}
	// Output:
	// replay pending
	// done matched 3 replayed 3
	// job 7 replays job 3 - replayed schema v2
	// job 6 replays job 2 - replayed schema v2
	// job 5 replays job 1 - replayed schema v2
}

// waitOp waits, round after round of the worker's operator, until the
// operation is in state (a liveness guard).
func (e *env) waitOp(id string, state redrive.OperationState) *redrive.Operation {
	e.t.Helper()
	var op *redrive.Operation
	untilSignal(e.t, e.ops, fmt.Sprintf("operation %s %s", id, state), func() bool {
		var err error
		op, err = e.client.Operation(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		return op.State == state
	})
	return op
}

// makeDeadJobs enqueues n jobs of kind "fail" that die at once.
func makeDeadJobs(t *testing.T, e *env, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "dies", Payload: map[string]int{"n": i}}
	}
	jobs, err := e.client.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, n)
	for i, j := range jobs {
		ids[i] = j.ID
	}
	for _, id := range ids {
		e.waitState(id, redrive.Dead)
	}
	return ids
}

// The leader worker runs a redrive started by the client: every dead job
// is redriven once, and runs again.
func TestOperationRedriveByWorker(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: 20 * time.Millisecond})
	fixed := make(chan struct{})
	e.worker.HandleFunc("dies", func(ctx context.Context, j *redrive.Job) error {
		select {
		case <-fixed:
			return nil
		default:
			return redrive.Permanent(errors.New("bad input"))
		}
	})
	e.start()
	ids := makeDeadJobs(t, e, 25)
	close(fixed)
	op, err := e.client.StartOperation(context.Background(), redrive.OperationRequest{Kind: redrive.OperationRedrive, Batch: 10, Note: "fixed"})
	if err != nil {
		t.Fatal(err)
	}
	op = e.waitOp(op.ID, redrive.OperationDone)
	if p := op.Progress; p.Matched != 25 || p.Redriven != 25 || p.Processed != 25 || p.Refused != 0 {
		t.Fatalf("progress %+v", p)
	}
	for _, id := range ids {
		j := e.waitState(id, redrive.Completed)
		if j.Redriven != 1 {
			t.Fatalf("job %d redriven %d times", id, j.Redriven)
		}
	}
}

// An operation started (or resumed) through the worker's own client is
// claimed at once, not at the worker's next poll: with a poll of an hour,
// it still runs.
func TestOperationStartWakesWorker(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: time.Hour})
	e.worker.HandleFunc("dies", func(ctx context.Context, j *redrive.Job) error {
		return redrive.Permanent(errors.New("bad input"))
	})
	e.start()
	makeDeadJobs(t, e, 3) // the operations loop made its first pass meanwhile
	op, err := e.client.StartOperation(context.Background(), redrive.OperationRequest{Kind: redrive.OperationPurge})
	if err != nil {
		t.Fatal(err)
	}
	op = e.waitOp(op.ID, redrive.OperationDone)
	if op.Progress.Purged != 3 {
		t.Fatalf("progress %+v, want 3 purged", op.Progress)
	}
}

// Pause stops the runner after its batch; resume continues at the
// cursor; cancel ends it for good. Nothing is replayed twice.
func TestOperationPauseResumeCancel(t *testing.T) {
	var buf syncBuffer
	e := newEnv(t, redrive.WorkerOptions{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	e.worker.HandleFunc("doc", func(ctx context.Context, j *redrive.Job) error { return nil })
	ctx := context.Background()
	reqs := make([]redrive.Request, 60)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "doc", Payload: map[string]int{"i": i}}
	}
	if _, err := e.client.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	// 20 jobs a second in batches of 5: the pause lands midway.
	op, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationReplay, Filter: redrive.Filter{Kind: "doc"}, Batch: 5, Rate: 20})
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	operation := func() *redrive.Operation {
		cur, err := e.client.Operation(ctx, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	untilSignal(t, e.ops, "5 jobs replayed", func() bool { return operation().Progress.Replayed >= 5 })
	paused, err := e.client.PauseOperation(ctx, op.ID)
	if err != nil || paused.State != redrive.OperationPaused {
		t.Fatalf("pause: %+v, %v", paused, err)
	}
	// The runner notices at its next step or renewal and stops; the
	// progress then stays put over the operator's next rounds (every
	// PollInterval), which claim nothing.
	waitLogged(t, &buf, "the runner to stop", func(l map[string]any) bool {
		return l["msg"] == "operation stopped" && l["operation"] == op.ID
	})
	// Forget the signals of the runner's batches: the rounds waited for
	// below all begin after the runner stopped.
	for len(e.ops) > 0 {
		<-e.ops
	}
	a := operation()
	for range 3 {
		testwait.Recv(t, "a round of the operator", 30*time.Second, e.ops)
	}
	b := operation()
	if a.State != redrive.OperationPaused || b.Progress.Replayed != a.Progress.Replayed || a.Progress.Replayed >= 60 {
		t.Fatalf("paused operation moved: %+v then %+v", a.Progress, b.Progress)
	}
	if _, err := e.client.ResumeOperation(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	done := e.waitOp(op.ID, redrive.OperationDone)
	if done.Progress.Replayed != 60 {
		t.Fatalf("replayed %d, want 60", done.Progress.Replayed)
	}
	res, err := e.client.List(ctx, redrive.Filter{Kind: "doc"}, redrive.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := map[int64]int{}
	for _, j := range res.Jobs {
		if j.ReplayOf != 0 {
			count[j.ReplayOf]++
		}
	}
	if len(count) != 60 {
		t.Fatalf("%d sources replayed, want 60", len(count))
	}
	for id, n := range count {
		if n != 1 {
			t.Fatalf("job %d replayed %d times", id, n)
		}
	}
	if _, err := e.client.CancelOperation(ctx, op.ID); !errors.Is(err, redrive.ErrConflict) {
		t.Fatalf("cancel of a done operation: %v, want ErrConflict", err)
	}
	// Cancel a pending one (no worker claims it: it is canceled first).
	e.stop()
	p, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationPurge})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.client.CancelOperation(ctx, p.ID)
	if err != nil || c.State != redrive.OperationCanceled {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
}

// An export writes every dead job's folder; RunOperation runs it here.
func TestOperationExport(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: 20 * time.Millisecond})
	e.worker.HandleFunc("dies", func(ctx context.Context, j *redrive.Job) error {
		return redrive.Permanent(errors.New("bad input"))
	})
	e.start()
	ids := makeDeadJobs(t, e, 7)
	e.stop()
	dir := filepath.Join(t.TempDir(), "dlq")
	ctx := context.Background()
	op, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationExport, Dir: dir, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	op, err = e.client.RunOperation(ctx, op.ID, func(o *redrive.Operation) { seen = append(seen, o.Progress.Exported) })
	if err != nil || op.State != redrive.OperationDone || op.Progress.Exported != 7 || op.Progress.Matched != 7 {
		t.Fatalf("export: %+v, %v", op, err)
	}
	if len(seen) < 3 {
		t.Errorf("progress reported %d times, want one per batch", len(seen))
	}
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(id, 10), "error.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ee redrive.ExportedError
		if err := json.Unmarshal(b, &ee); err != nil || ee.JobID != id || ee.Class != "permanent" {
			t.Fatalf("error.json of %d: %s (%v)", id, b, err)
		}
	}
}

// Bad requests are refused before the store, naming the field.
func TestOperationRequestInvalid(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	for name, r := range map[string]redrive.OperationRequest{
		"kind":               {Kind: "shred"},
		"batch":              {Kind: redrive.OperationPurge, Batch: 1001},
		"rate":               {Kind: redrive.OperationPurge, Rate: -1},
		"ids":                {Kind: redrive.OperationPurge, IDs: []int64{1}},
		"payload":            {Kind: redrive.OperationReplay, Payload: map[string]int{"a": 1}},
		"dir":                {Kind: redrive.OperationExport},
		"dir on purge":       {Kind: redrive.OperationPurge, Dir: "/tmp"},
		"root on purge":      {Kind: redrive.OperationPurge, Root: "/tmp"},
		"dir not under root": {Kind: redrive.OperationExport, Root: "/srv/exports", Dir: "/srv/other"},
		"dir is root":        {Kind: redrive.OperationExport, Root: "/srv/exports", Dir: "/srv/exports/.."},
		"payload field":      {Kind: redrive.OperationReplay, Filter: redrive.Filter{PayloadField: "a b", PayloadValue: json.RawMessage(`1`)}},
	} {
		if err := e.client.ValidateOperation(r); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if _, err := e.client.StartOperation(context.Background(), r); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	ops, _, err := e.client.Operations(context.Background(), "", 10)
	if err != nil || len(ops) != 0 {
		t.Fatalf("refused requests stored operations: %d, %v", len(ops), err)
	}
}

// A runner whose context ends releases the lease: another runner takes
// the operation over at once and finishes it, handling no job twice.
func TestOperationReleaseOnStop(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	reqs := make([]redrive.Request, 30)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "doc"}
	}
	if _, err := e.client.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	op, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationReplay, Batch: 2, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	got, err := e.client.RunOperation(runCtx, op.ID, func(o *redrive.Operation) {
		if o.Progress.Replayed >= 6 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || got.State != redrive.OperationRunning || got.Progress.Replayed >= 30 {
		t.Fatalf("stopped runner: %+v, %v", got, err)
	}
	if got.LeaseUntil == nil || got.LeaseUntil.After(time.Now()) {
		t.Fatalf("lease not released: %v", got.LeaseUntil)
	}
	done, err := e.client.RunOperation(ctx, op.ID, nil)
	if err != nil || done.State != redrive.OperationDone || done.Progress.Replayed != 30 {
		t.Fatalf("second runner: %+v, %v", done, err)
	}
	n, err := e.client.Count(ctx, redrive.Filter{})
	if err != nil || n != 60 {
		t.Fatalf("%d jobs, want 30 sources and 30 copies (%v)", n, err)
	}
}

// An export that cannot write fails the operation with the reason, and
// the runner does not retry it.
func TestOperationExportWriteFails(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: 20 * time.Millisecond})
	e.worker.HandleFunc("dies", func(ctx context.Context, j *redrive.Job) error {
		return redrive.Permanent(errors.New("bad input"))
	})
	e.start()
	makeDeadJobs(t, e, 2)
	e.stop()
	file := filepath.Join(t.TempDir(), "not-a-folder")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	op, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationExport, Dir: file})
	if err != nil {
		t.Fatal(err)
	}
	op, err = e.client.RunOperation(ctx, op.ID, nil)
	if err == nil || op.State != redrive.OperationFailed || op.Progress.Exported != 0 || op.Cursor != 0 ||
		!strings.Contains(op.Error, "not-a-folder") {
		t.Fatalf("export into a file: %+v, %v", op, err)
	}
}
