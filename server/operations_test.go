package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// runWorker runs a worker on the env's store, as serve does: the leader
// that runs the operations. Its only queue holds no job, so it runs the
// operations and nothing else.
func (e *env) runWorker() {
	e.t.Helper()
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{"operations-only": 1},
		PollInterval: 10 * time.Millisecond, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
}

// start sends a request that starts an operation, checks the 202 answer
// and its Location, and returns the operation.
func (e *env) start(method, path, body string) Operation {
	e.t.Helper()
	r := e.do(method, path, body)
	var ob operationBody
	e.want(r, http.StatusAccepted, &ob)
	op := ob.Operation
	if !strings.HasPrefix(op.ID, "op_") || len(op.ID) != 27 {
		e.t.Fatalf("operation id %q", op.ID)
	}
	if loc := r.header.Get("Location"); loc != "/v1/operations/"+op.ID {
		e.t.Fatalf("Location %q for %s", loc, op.ID)
	}
	if op.StartedAt.IsZero() || op.RefusedIDs == nil || op.State != OperationPending {
		e.t.Fatalf("started operation %+v", op)
	}
	return op
}

// getOp reads an operation.
func (e *env) getOp(id string) Operation {
	e.t.Helper()
	var ob operationBody
	e.want(e.do("GET", "/v1/operations/"+id, ""), 200, &ob)
	return ob.Operation
}

// await polls the operation until it ends (a liveness bound, not a
// timing assertion).
func (e *env) await(op Operation) Operation {
	e.t.Helper()
	id := op.ID
	testwait.Until(e.t, "operation "+id+" to end", 20*time.Second, func() bool {
		op = e.getOp(id)
		if !op.State.Final() && op.FinishedAt != nil {
			e.t.Fatalf("unfinished operation with finished_at: %+v", op)
		}
		return op.State.Final()
	})
	if op.FinishedAt == nil || op.FinishedAt.Before(op.StartedAt) {
		e.t.Fatalf("ended operation without a sound finished_at: %+v", op)
	}
	return op
}

// awaitProcessed polls an operation until it has processed n jobs.
func (e *env) awaitProcessed(id string, n int64) Operation {
	e.t.Helper()
	var op Operation
	testwait.Until(e.t, fmt.Sprintf("operation %s to process %d jobs", id, n), 20*time.Second, func() bool {
		op = e.getOp(id)
		if op.Processed < n && op.State.Final() {
			e.t.Fatalf("operation ended before it processed %d jobs: %+v", n, op)
		}
		return op.Processed >= n
	})
	return op
}

// buryMany makes n dead jobs in queue with the store, in bulk.
func (e *env) buryMany(queue, msg string, n int) []int64 {
	e.t.Helper()
	ctx := context.Background()
	var ids []int64
	for len(ids) < n {
		reqs := make([]redrive.Request, min(n-len(ids), 1000))
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "dead-kind", Queue: queue, Payload: map[string]int{"n": len(ids) + i}}
		}
		if _, err := e.client.EnqueueMany(ctx, reqs); err != nil {
			e.t.Fatal(err)
		}
		now := time.Now()
		got, err := e.st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: len(reqs), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil || len(got) != len(reqs) {
			e.t.Fatalf("fetch: %d, %v", len(got), err)
		}
		outs := make([]store.Outcome, len(got))
		for i, j := range got {
			outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Bury, At: now,
				Class: failure.Permanent, DeadReason: "permanent", Fingerprint: "permanent:" + msg, Error: msg,
				Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "permanent", Error: msg}}
			ids = append(ids, j.ID)
		}
		if _, err := e.st.Finish(ctx, outs); err != nil {
			e.t.Fatal(err)
		}
	}
	return ids
}

func (e *env) deadCount(queue string) int64 {
	e.t.Helper()
	n, err := e.client.Count(context.Background(), redrive.Filter{Queue: queue, States: []redrive.State{redrive.Dead}})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// slowRedrive starts a redrive of the ids at the smallest rate: the first
// job goes at once, the next only 10 s later, so the operation stays
// running until canceled or paused.
func (e *env) slowRedrive(ids []int64) Operation {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"ids": ids, "rate": MinRate})
	op := e.start("POST", "/v1/dlq/redrive", string(b))
	return e.awaitProcessed(op.ID, 1)
}

func TestOperationShape(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.buryMany("q", "boom", 2)
	r := e.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d,%d],"rate":%g,"note":"n"}`, ids[0], ids[1], MinRate))
	if r.status != 202 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var top map[string]map[string]json.RawMessage
	r.json(t, &top)
	raw := top["operation"]
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"batch", "canceled", "cursor", "dir", "error", "exported", "failed", "filter", "finished_at", "id", "kind", "matched", "note",
		"processed", "purged", "rate", "redriven", "refused", "refused_ids", "rekeyed", "replayed", "run_at", "skipped", "started_at", "state",
		"updated_at", "worker"}
	if !slices.Equal(keys, want) || len(top) != 1 {
		t.Fatalf("operation keys %v, want %v: %s", keys, want, r.body)
	}
	// No worker runs on this store yet: the operation waits, pending.
	if string(raw["finished_at"]) != "null" || string(raw["run_at"]) != "null" || string(raw["refused_ids"]) != "[]" ||
		string(raw["state"]) != `"pending"` || string(raw["kind"]) != `"redrive"` || string(raw["error"]) != `""` ||
		string(raw["note"]) != `"n"` || string(raw["batch"]) != "100" || string(raw["filter"]) != fmt.Sprintf(`{"ids":[%d,%d]}`, ids[0], ids[1]) {
		t.Fatalf("pending operation: %s", r.body)
	}
	var started time.Time
	if err := json.Unmarshal(raw["started_at"], &started); err != nil || time.Since(started) > time.Hour {
		t.Fatalf("started_at %s: %v", raw["started_at"], err)
	}
	id := ""
	_ = json.Unmarshal(raw["id"], &id)
	if op := e.getOp(id); op.State != OperationPending || op.Processed != 0 {
		t.Fatalf("without a worker: %+v", op)
	}
	e.runWorker()
	op := e.awaitProcessed(id, 1)
	if op.State != OperationRunning || op.Worker == "" || op.RunAt == nil || op.Matched != 2 || op.Cursor != ids[0] {
		t.Fatalf("running operation: %+v", op)
	}
	var ob operationBody
	e.want(e.do("DELETE", "/v1/operations/"+id, ""), 200, &ob)
	if ob.Operation.FinishedAt == nil || ob.Operation.State != OperationCanceled {
		t.Fatalf("canceled operation: %+v", ob.Operation)
	}
}

func TestOperationRoutes(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker()
	e.buryMany("a", "boom", 30)
	locked := e.makeDead("a", "boom", failure.Permanent, redrive.NotReprocessable())
	e.buryMany("b", "bang", 5)

	// A redrive by filter, polled to its end.
	op := e.start("POST", "/v1/dlq/redrive", `{"filter":{"queue":"a"},"payload":{"v":2},"note":"fix","batch":7}`)
	if op.Kind != OperationRedrive || op.Note != "fix" || op.Batch != 7 || string(op.Filter) != `{"queue":"a"}` {
		t.Fatalf("started: %+v", op)
	}
	op = e.await(op)
	if op.State != OperationDone || op.Matched != 31 || op.Redriven != 30 || op.Refused != 1 || op.Processed != 31 ||
		!slices.Equal(op.RefusedIDs, []int64{locked}) || op.Error != "" {
		t.Fatalf("redrive: %+v", op)
	}
	if e.deadCount("a") != 1 {
		t.Fatalf("%d dead jobs left in a", e.deadCount("a"))
	}
	// A purge, polled to its end.
	pg := e.await(e.start("DELETE", "/v1/dlq?queue=b", ""))
	if pg.State != OperationDone || pg.Kind != OperationPurge || pg.Matched != 5 || pg.Purged != 5 || pg.Processed != 5 {
		t.Fatalf("purge: %+v", pg)
	}
	if e.deadCount("b") != 0 {
		t.Fatal("purge left dead jobs")
	}

	// The list: newest first, by pages.
	var l struct {
		Operations []Operation `json:"operations"`
		Next       string      `json:"next"`
	}
	e.want(e.do("GET", "/v1/operations", ""), 200, &l)
	if len(l.Operations) != 2 || l.Operations[0].ID != pg.ID || l.Operations[1].ID != op.ID || l.Next != "" {
		t.Fatalf("list: %+v", l)
	}
	l.Next = ""
	e.want(e.do("GET", "/v1/operations?limit=1", ""), 200, &l)
	if len(l.Operations) != 1 || l.Operations[0].ID != pg.ID || l.Next != pg.ID {
		t.Fatalf("list limit=1: %+v", l)
	}
	before := l.Next
	l.Next = ""
	e.want(e.do("GET", "/v1/operations?limit=1&before="+before, ""), 200, &l)
	if len(l.Operations) != 1 || l.Operations[0].ID != op.ID || l.Next != "" {
		t.Fatalf("second page: %+v", l)
	}
	wantErr(t, e.do("GET", "/v1/operations?before=x", ""), 400, "invalid", "before")
	wantErr(t, e.do("GET", "/v1/operations?before=op_000000000000000000000000", ""), 400, "invalid", "before")
	// A finished operation cannot be canceled, paused or resumed.
	wantErr(t, e.do("DELETE", "/v1/operations/"+op.ID, ""), 409, "conflict", "")
	for _, a := range []string{"pause", "resume", "cancel"} {
		wantErr(t, e.do("POST", "/v1/operations/"+op.ID+"/"+a, ""), 409, "conflict", "")
	}
	// Unknown ids.
	wantErr(t, e.do("GET", "/v1/operations/op_000000000000000000000000", ""), 404, "not_found", "id")
	wantErr(t, e.do("DELETE", "/v1/operations/nope", ""), 404, "not_found", "id")
	wantErr(t, e.do("POST", "/v1/operations/op_000000000000000000000000/pause", ""), 404, "not_found", "id")
	wantErr(t, e.do("POST", "/v1/operations", ""), 405, "method_not_allowed", "")

	// An empty list is an empty array.
	e2 := newEnv(t, Options{})
	r := e2.do("GET", "/v1/operations", "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"operations":[]}` {
		t.Fatalf("empty list: %d %s", r.status, r.body)
	}
}

func TestOperationWait(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker()
	ids := e.buryMany("w", "boom", 3)
	var ob operationBody
	r := e.do("POST", "/v1/dlq/redrive?wait=true", fmt.Sprintf(`{"ids":[%d,%d,%d],"rate":1000}`, ids[0], ids[1], ids[2]))
	e.want(r, 200, &ob)
	if op := ob.Operation; op.State != OperationDone || op.Redriven != 3 || op.FinishedAt == nil || op.Rate != 1000 {
		t.Fatalf("redrive wait=true: %+v", op)
	}
	if r.header.Get("Location") != "" {
		t.Errorf("wait=true answered a Location")
	}
	e.buryMany("w2", "boom", 4)
	e.want(e.do("DELETE", "/v1/dlq?queue=w2&wait=true", ""), 200, &ob)
	if op := ob.Operation; op.State != OperationDone || op.Purged != 4 || op.Matched != 4 {
		t.Fatalf("purge wait=true: %+v", op)
	}
	// wait=false is the default.
	e.start("DELETE", "/v1/dlq?queue=w2&wait=false", "")
}

// TestOperationCancel cancels a rate-limited redrive midway: what was
// done stays done, the rest stays dead.
func TestOperationCancel(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker()
	ids := e.buryMany("c", "boom", 3)
	op := e.slowRedrive(ids)
	if op.State != OperationRunning || op.Matched != 3 {
		t.Fatalf("slow redrive: %+v", op)
	}
	var ob operationBody
	e.want(e.do("POST", "/v1/operations/"+op.ID+"/cancel", ""), 200, &ob)
	c := ob.Operation
	if c.State != OperationCanceled || c.Redriven != 1 || c.Processed != 1 || c.FinishedAt == nil || c.Worker != "" {
		t.Fatalf("canceled: %+v", c)
	}
	if e.deadCount("c") != 2 {
		t.Fatalf("%d dead jobs left, want 2", e.deadCount("c"))
	}
	if j, _ := e.client.Get(context.Background(), ids[0]); j.State != redrive.Pending {
		t.Fatalf("the first job is %s, want pending (done stays done)", j.State)
	}
	// Canceling again changes nothing.
	e.want(e.do("DELETE", "/v1/operations/"+op.ID, ""), 200, &ob)
	if ob.Operation.State != OperationCanceled {
		t.Fatalf("canceled twice: %+v", ob.Operation)
	}
	wantErr(t, e.do("POST", "/v1/operations/"+op.ID+"/resume", ""), 409, "conflict", "")
}

// TestOperationPauseResume pauses a redrive midway and resumes it: it
// continues where it stopped. The store holds the runner's second batch
// until the pause is recorded: on the wall clock, a loaded machine let
// the redrive (40 jobs, 20 a second) end before the pause came, or the
// runner's batch was still under way when the test looked.
func TestOperationPauseResume(t *testing.T) {
	e, gate := newGatedEnv(t, Options{}, 1)
	e.runWorker()
	ids := e.buryMany("p", "boom", 40)
	b, _ := json.Marshal(map[string]any{"filter": map[string]string{"queue": "p"}, "rate": 20})
	op := e.start("POST", "/v1/dlq/redrive", string(b))
	testwait.Recv(t, "the runner's second batch", time.Minute, gate.held)
	var ob operationBody
	e.want(e.do("POST", "/v1/operations/"+op.ID+"/pause", ""), 200, &ob)
	if ob.Operation.State != OperationPaused || ob.Operation.Processed != 20 {
		t.Fatalf("paused: %+v", ob.Operation)
	}
	// The batch after the pause is refused: the runner stops there.
	gate.release()
	if err := testwait.Recv(t, "the batch after the pause", time.Minute, gate.after); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the batch after the pause: %v, want a conflict", err)
	}
	first := e.getOp(op.ID)
	// Real time: that nothing moves for a while, at 20 jobs a second, is
	// what is tested.
	time.Sleep(300 * time.Millisecond)
	second := e.getOp(op.ID)
	if first.State != OperationPaused || second.State != OperationPaused || first.Processed != 20 || second.Processed != 20 {
		t.Fatalf("paused operation moved: %+v then %+v", first, second)
	}
	e.want(e.do("POST", "/v1/operations/"+op.ID+"/resume", ""), 200, &ob)
	if ob.Operation.State != OperationPending {
		t.Fatalf("resumed: %+v", ob.Operation)
	}
	done := e.await(op)
	if done.State != OperationDone || done.Redriven != 40 || done.Processed != 40 {
		t.Fatalf("after resume: %+v", done)
	}
	for _, id := range ids {
		j, _ := e.client.Get(context.Background(), id)
		if j.Redriven != 1 {
			t.Fatalf("job %d redriven %d times", id, j.Redriven)
		}
	}
}

func TestOperationLimit(t *testing.T) {
	// No worker: the operations stay pending, unfinished.
	e := newEnv(t, Options{MaxOperations: 2})
	ids := e.buryMany("l", "boom", 6)
	a := e.start("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[0]))
	e.start("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[1]))
	wantErr(t, e.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[4])), 429, "too_many_operations", "")
	wantErr(t, e.do("DELETE", "/v1/dlq?queue=l", ""), 429, "too_many_operations", "")
	wantErr(t, e.do("POST", "/v1/replay", `{"all":true}`), 429, "too_many_operations", "")
	// Bad input is still refused as such.
	wantErr(t, e.do("DELETE", "/v1/dlq", ""), 400, "filter_required", "all")
	// Once one ends, another may start.
	e.want(e.do("DELETE", "/v1/operations/"+a.ID, ""), 200, nil)
	e.runWorker()
	var ob operationBody
	e.want(e.do("POST", "/v1/dlq/redrive?wait=true", fmt.Sprintf(`{"ids":[%d]}`, ids[4])), 200, &ob)
	if ob.Operation.Redriven != 1 {
		t.Fatalf("redrive after the limit freed: %+v", ob.Operation)
	}
}

func TestOperationAuth(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	e.runWorker()
	ids := e.buryMany("x", "boom", 1)
	op := e.start("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[0]))
	e.token = ""
	for i, c := range []struct{ method, path string }{
		{"GET", "/v1/operations"},
		{"GET", "/v1/operations/" + op.ID},
		{"DELETE", "/v1/operations/" + op.ID},
		{"POST", "/v1/operations/" + op.ID + "/pause"},
		{"POST", "/v1/operations/" + op.ID + "/resume"},
		{"POST", "/v1/operations/" + op.ID + "/cancel"},
		{"GET", "/v1/dlq/export"},
		{"POST", "/v1/dlq/export"},
		{"POST", "/v1/replay"},
		{"DELETE", "/v1/dlq?all=true"},
		{"POST", "/v1/dlq/redrive"},
	} {
		wantErr(t, e.do(c.method, c.path, ""), 401, "unauthorized", "")
		// A wrong token is refused (each from an address of its own, so
		// that the guesses are not throttled).
		wantErr(t, serveFrom(e.api, fmt.Sprintf("192.0.2.%d:1000", i+1), c.method, c.path, "Authorization", "Bearer wrong"),
			401, "unauthorized", "")
	}
	e.token = "tok"
	if got := e.await(op); got.State != OperationDone {
		t.Fatalf("operation: %+v", got)
	}
}

// TestServerClose: Close refuses new operations and answers the requests
// waiting on one with its state; the operations go on in the worker.
func TestServerClose(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker()
	ids := e.buryMany("s", "boom", 4)
	waited := make(chan resp, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/dlq/redrive?wait=true", strings.NewReader(fmt.Sprintf(`{"ids":[%d,%d],"rate":0.1}`, ids[2], ids[3])))
		req.Header.Set("Content-Type", "application/json")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			waited <- resp{status: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(res.Body).WriteTo(&b)
		waited <- resp{status: res.StatusCode, header: res.Header, body: []byte(b.String())}
	}()
	var l struct {
		Operations []Operation `json:"operations"`
	}
	testwait.Until(t, "the waiting redrive to process its first job", 20*time.Second, func() bool {
		e.want(e.do("GET", "/v1/operations", ""), 200, &l)
		return len(l.Operations) == 1 && l.Operations[0].Processed == 1
	})
	if err := e.api.Close(); err != nil {
		t.Fatal(err)
	}
	w := <-waited
	var ob operationBody
	e.want(w, 200, &ob)
	if ob.Operation.State != OperationRunning || ob.Operation.Redriven != 1 {
		t.Fatalf("the waiting request got %+v", ob.Operation)
	}
	wantErr(t, e.do("DELETE", "/v1/dlq?all=true", ""), 503, "shutting_down", "")
	// The reads, and the changes to existing operations, still work.
	e.want(e.do("POST", "/v1/operations/"+ob.Operation.ID+"/cancel", ""), 200, nil)

	// Options.Context.
	ctx, cancel := context.WithCancel(context.Background())
	e2 := newEnv(t, Options{Context: ctx})
	ids = e2.buryMany("s", "boom", 2)
	cancel()
	wantErr(t, e2.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[1])), 503, "shutting_down", "")
}

// TestReplay replays completed jobs selected by state and a payload
// field: each new job names its source.
func TestReplay(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	var done []int64
	for i := range 5 {
		j, err := e.client.Enqueue(ctx, "index", map[string]any{"customer_id": 40 + i%2*2, "n": i}, redrive.InQueue("rq"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "rq", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil || len(got) != 1 {
			t.Fatalf("fetch: %v", err)
		}
		if _, err := e.st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: "rq", Attempt: 1, Lease: got[0].Lease, Worker: "w", Kind: store.Complete, At: now}}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			done = append(done, j.ID)
		}
	}
	e.runWorker()
	var ob operationBody
	e.want(e.do("POST", "/v1/replay?wait=true", `{"filter":{"queue":"rq","states":["completed"],"payload_field":"customer_id","payload_value":42},"batch":1,"rate":100,"note":"reindex"}`), 200, &ob)
	op := ob.Operation
	if op.Kind != OperationReplay || op.State != OperationDone || op.Matched != 2 || op.Replayed != 2 || op.Processed != 2 || op.Batch != 1 ||
		string(op.Filter) != `{"states":["completed"],"queue":"rq","payload_field":"customer_id","payload_value":42}` {
		t.Fatalf("replay: %+v (filter %s)", op, op.Filter)
	}
	var l struct {
		Jobs []*redrive.Job `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/jobs?queue=rq&state=pending", ""), 200, &l)
	var sources []int64
	for _, j := range l.Jobs {
		var full redrive.Job
		e.want(e.do("GET", "/v1/jobs/"+strconv.FormatInt(j.ID, 10), ""), 200, &full)
		if full.ReplayOf == 0 || full.History[0].Kind != "replayed" || full.History[0].ReplayOf != full.ReplayOf {
			t.Fatalf("replay job: %+v", full)
		}
		sources = append(sources, full.ReplayOf)
	}
	slices.Sort(sources)
	if !slices.Equal(sources, done) {
		t.Fatalf("replayed %v, want %v", sources, done)
	}
	// Bad input names its field.
	for body, field := range map[string]string{
		`{}`:                             "filter",
		`{"filter":{"states":["gone"]}}`: "filter.states",
		`{"filter":{"payload_field":"a b","payload_value":1}}`:            "filter.payload_field",
		`{"filter":{"payload_field":"a","payload_value":{"x":1}}}`:        "filter.payload_value",
		`{"filter":{"payload_field":"a"}}`:                                "filter.payload_value",
		`{"filter":{"payload_value":1}}`:                                  "filter.payload_field",
		`{"filter":{"since":"yesterday"}}`:                                "filter.since",
		`{"all":true,"batch":5000}`:                                       "batch",
		`{"all":true,"rate":-1}`:                                          "rate",
		`{"all":true,"note":"` + strings.Repeat("x", MaxNote+1) + `"}`:    "note",
		`{"filter":{"class":"weird"}}`:                                    "filter.class",
		`{"filter":{"queue":"` + strings.Repeat("q", 300) + `"},"x":1}`:   "x",
		`{"filter":{"queue":"` + strings.Repeat("q", 300) + `"}}`:         "filter.queue",
		`{"filter":{"payload_field":"a","payload_value":"x"},"batch":-1}`: "batch",
	} {
		r := e.do("POST", "/v1/replay", body)
		if r.status != 400 {
			t.Fatalf("%s: status %d: %s", body, r.status, r.body)
		}
		var eb errorBody
		_ = json.Unmarshal(r.body, &eb)
		if eb.Error.Field != field {
			t.Errorf("%s: field %q, want %q: %s", body, eb.Error.Field, field, r.body)
		}
	}
}

// TestExportOperation: folder exports are refused without an export
// folder, confined to it otherwise, and written by the worker.
func TestExportOperation(t *testing.T) {
	e := newEnv(t, Options{})
	wantErr(t, e.do("POST", "/v1/dlq/export", `{"all":true,"dir":"x"}`), 403, "export_disabled", "dir")

	root := filepath.Join(t.TempDir(), "made-on-first-export")
	e = newEnv(t, Options{ExportDir: root})
	e.runWorker()
	ids := e.buryMany("x", "boom", 3)
	for _, dir := range []string{"", "../out", "/etc", "a/../../b"} {
		b, _ := json.Marshal(map[string]any{"all": true, "dir": dir})
		wantErr(t, e.do("POST", "/v1/dlq/export", string(b)), 400, "invalid", "dir")
	}
	wantErr(t, e.do("POST", "/v1/dlq/export", `{"dir":"out"}`), 400, "filter_required", "filter")
	var ob operationBody
	e.want(e.do("POST", "/v1/dlq/export?wait=true", `{"filter":{"queue":"x"},"dir":"nightly/out","batch":2}`), 200, &ob)
	if op := ob.Operation; op.Kind != OperationExport || op.State != OperationDone || op.Exported != 3 || op.Dir != filepath.Join(root, "nightly/out") {
		t.Fatalf("export: %+v", op)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(root, "nightly", "out", strconv.FormatInt(id, 10), "metadata.json")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExportSymlinkConfined: a symbolic link inside the export folder
// does not lead a folder export out of it, whether it names the folder
// exported to, one of its parents or a job's folder: the export fails
// and nothing is written outside.
func TestExportSymlinkConfined(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{ExportDir: root})
	e.runWorker()
	ids := e.buryMany("x", "boom", 2)
	if err := os.MkdirAll(filepath.Join(root, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "jobs", strconv.FormatInt(ids[0], 10))); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"link/x", "link", "jobs"} {
		var ob operationBody
		e.want(e.do("POST", "/v1/dlq/export?wait=true", `{"filter":{"queue":"x"},"dir":"`+dir+`"}`), 200, &ob)
		if op := ob.Operation; op.State != OperationFailed || op.Exported != 0 {
			t.Errorf("export to %s through a symbolic link: %+v", dir, op)
		}
		left, err := os.ReadDir(elsewhere)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("export to %s wrote outside the export folder: %v", dir, left)
		}
	}
}

// TestOperationsConcurrent starts, polls, lists and cancels operations
// from many goroutines at once (run with -race).
func TestOperationsConcurrent(t *testing.T) {
	e := newEnv(t, Options{MaxOperations: 4})
	e.runWorker()
	for q := range 8 {
		e.buryMany("q"+strconv.Itoa(q), "boom", 20)
	}
	var (
		wg                    sync.WaitGroup
		mu                    sync.Mutex
		accepted, tooMany     int
		redriven, purgedTotal int64
	)
	for g := range 16 {
		wg.Go(func() {
			queue := "q" + strconv.Itoa(g%8)
			var req *http.Request
			if g%2 == 0 {
				req, _ = http.NewRequest("POST", e.srv.URL+"/v1/dlq/redrive", strings.NewReader(`{"filter":{"queue":"`+queue+`"}}`))
				req.Header.Set("Content-Type", "application/json")
			} else {
				req, _ = http.NewRequest("DELETE", e.srv.URL+"/v1/dlq?queue="+queue, nil)
			}
			res, err := e.srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			var ob operationBody
			_ = json.NewDecoder(res.Body).Decode(&ob)
			res.Body.Close()
			switch res.StatusCode {
			case 429:
				mu.Lock()
				tooMany++
				mu.Unlock()
				return
			case 202:
			default:
				t.Errorf("status %d", res.StatusCode)
				return
			}
			// Poll it to its end, listing meanwhile (not testwait.Until:
			// this goroutine may not call t.Fatal).
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); <-tick.C {
				res, err := e.srv.Client().Get(e.srv.URL + "/v1/operations/" + ob.Operation.ID)
				if err != nil {
					t.Error(err)
					return
				}
				_ = json.NewDecoder(res.Body).Decode(&ob)
				res.Body.Close()
				if res2, err := e.srv.Client().Get(e.srv.URL + "/v1/operations?limit=5"); err == nil {
					res2.Body.Close()
				}
				if ob.Operation.State.Final() {
					break
				}
			}
			if ob.Operation.State != OperationDone {
				t.Errorf("operation did not end done within 20s: %+v", ob.Operation)
			}
			mu.Lock()
			accepted++
			redriven += ob.Operation.Redriven
			purgedTotal += ob.Operation.Purged
			mu.Unlock()
		})
	}
	wg.Wait()
	if accepted+tooMany != 16 || accepted == 0 {
		t.Fatalf("accepted %d, refused %d", accepted, tooMany)
	}
	// Every dead job was redriven or purged at most once.
	if redriven+purgedTotal > 160 {
		t.Fatalf("redriven %d + purged %d > 160", redriven, purgedTotal)
	}
	var l struct {
		Operations []Operation `json:"operations"`
	}
	e.want(e.do("GET", "/v1/operations", ""), 200, &l)
	if len(l.Operations) != accepted {
		t.Fatalf("%d operations listed, %d accepted", len(l.Operations), accepted)
	}
	for i := 1; i < len(l.Operations); i++ {
		if l.Operations[i].StartedAt.After(l.Operations[i-1].StartedAt) {
			t.Fatalf("list not newest first: %+v", l.Operations)
		}
	}
}

// TestOperationWithoutClient: a server without a client answers 500 and
// stays up.
func TestOperationWithoutClient(t *testing.T) {
	api := New(Options{Logger: quiet})
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv, api: api}
	wantErr(t, e.do("DELETE", "/v1/dlq?all=true&wait=true", ""), 500, "internal", "")
	e.want(e.do("GET", "/healthz", ""), 200, nil)
}

// TestPurgeByIDs: DELETE /v1/dlq?id=... purges the dead jobs among the
// ids and leaves the others; ids do not mix with a filter or all.
func TestPurgeByIDs(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker()
	ids := e.buryMany("p", "boom", 3)
	pg := e.await(e.start("DELETE", fmt.Sprintf("/v1/dlq?id=%d,%d,99999", ids[0], ids[2]), ""))
	if pg.State != OperationDone || pg.Purged != 2 {
		t.Fatalf("purge by ids: %+v", pg)
	}
	if n := e.deadCount("p"); n != 1 {
		t.Fatalf("%d dead jobs left, want 1", n)
	}
	wantErr(t, e.do("DELETE", "/v1/dlq?id=0", ""), 400, "invalid", "id")
	wantErr(t, e.do("DELETE", "/v1/dlq?id=x", ""), 400, "invalid", "id")
	wantErr(t, e.do("DELETE", fmt.Sprintf("/v1/dlq?id=%d&queue=p", ids[1]), ""), 400, "invalid", "id")
	wantErr(t, e.do("DELETE", fmt.Sprintf("/v1/dlq?id=%d&all=true", ids[1]), ""), 400, "invalid", "all")
}
