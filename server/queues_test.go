package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// queueJSON is a queue as the API answers it, keys included, so that the
// test sees the exact shape.
type queueJSON struct {
	Name     string           `json:"name"`
	Paused   bool             `json:"paused"`
	PausedAt *time.Time       `json:"paused_at"`
	Jobs     map[string]int64 `json:"jobs"`
	// OldestDueAt, LatencyMS and Unconsumed: see redrive.Queue.
	OldestDueAt *time.Time `json:"oldest_due_at"`
	LatencyMS   int64      `json:"latency_ms"`
	Unconsumed  bool       `json:"unconsumed"`
}

// checkQueueShape fails unless raw is exactly one queue object: name,
// paused, paused_at (null unless paused), jobs with every state,
// oldest_due_at (null unless a job is due), latency_ms (0 unless a job is
// due) and unconsumed (only when a job is due).
func checkQueueShape(t *testing.T, raw json.RawMessage) queueJSON {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatalf("queue is not an object: %s", raw)
	}
	if len(keys) != 7 || keys["name"] == nil || keys["paused"] == nil || keys["paused_at"] == nil || keys["jobs"] == nil ||
		keys["oldest_due_at"] == nil || keys["latency_ms"] == nil || keys["unconsumed"] == nil {
		t.Fatalf("queue keys: %s", raw)
	}
	var q queueJSON
	if err := json.Unmarshal(raw, &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Jobs) != len(store.States) {
		t.Errorf("queue %q jobs %v: want every state", q.Name, q.Jobs)
	}
	for _, s := range store.States {
		if _, ok := q.Jobs[string(s)]; !ok {
			t.Errorf("queue %q jobs lack %s: %s", q.Name, s, raw)
		}
	}
	if q.Paused != (q.PausedAt != nil) {
		t.Errorf("queue %q: paused %v with paused_at %v", q.Name, q.Paused, q.PausedAt)
	}
	if q.OldestDueAt == nil && (q.LatencyMS != 0 || q.Unconsumed) || q.LatencyMS < 0 {
		t.Errorf("queue %q: latency_ms %d, unconsumed %v with oldest_due_at %v", q.Name, q.LatencyMS, q.Unconsumed, q.OldestDueAt)
	}
	return q
}

// listQueues calls GET /v1/queues and checks the shape of every queue.
func (e *env) listQueues() []queueJSON {
	e.t.Helper()
	var body struct {
		Queues []json.RawMessage `json:"queues"`
	}
	r := e.do("GET", "/v1/queues", "")
	e.want(r, 200, &body)
	if body.Queues == nil {
		e.t.Fatalf("GET /v1/queues: no queues array: %s", r.body)
	}
	out := make([]queueJSON, len(body.Queues))
	for i, raw := range body.Queues {
		out[i] = checkQueueShape(e.t, raw)
	}
	return out
}

// setPaused calls POST /v1/queues/{escaped}/{action} and checks the shape.
func (e *env) setPaused(escaped, action string) queueJSON {
	e.t.Helper()
	var body map[string]json.RawMessage
	r := e.do("POST", "/v1/queues/"+escaped+"/"+action, "")
	e.want(r, 200, &body)
	if len(body) != 1 || body["queue"] == nil {
		e.t.Fatalf("POST %s %s: body %s, want {\"queue\": ...}", escaped, action, r.body)
	}
	return checkQueueShape(e.t, body["queue"])
}

func TestQueues(t *testing.T) {
	e := newEnv(t, Options{Token: "t"})
	ctx := context.Background()
	if qs := e.listQueues(); len(qs) != 0 {
		t.Fatalf("queues of an empty store: %+v", qs)
	}
	if r := e.do("GET", "/v1/queues", ""); string(r.body) != `{"queues":[]}`+"\n" {
		t.Errorf("empty list: %s", r.body)
	}

	for range 3 {
		if _, err := e.client.Enqueue(ctx, "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	e.makeDead("mail", "boom", failure.Permanent)

	qs := e.listQueues()
	if len(qs) != 2 || qs[0].Name != "default" || qs[1].Name != "mail" || qs[0].Paused || qs[1].Paused ||
		qs[0].Jobs["pending"] != 3 || qs[1].Jobs["dead"] != 1 || qs[1].Jobs["pending"] != 0 {
		t.Fatalf("queues: %+v", qs)
	}
	// No worker serves default, where 3 jobs are due; mail has none due.
	if qs[0].OldestDueAt == nil || !qs[0].Unconsumed || qs[1].OldestDueAt != nil || qs[1].LatencyMS != 0 || qs[1].Unconsumed {
		t.Errorf("queues' latency: %+v", qs)
	}

	p := e.setPaused("default", "pause")
	if !p.Paused || p.PausedAt == nil || p.Name != "default" || p.Jobs["pending"] != 3 {
		t.Fatalf("pause: %+v", p)
	}
	// Idempotent: a second pause keeps the first time.
	if again := e.setPaused("default", "pause"); !again.Paused || !again.PausedAt.Equal(*p.PausedAt) {
		t.Errorf("pause again: %+v, want paused at %s", again, p.PausedAt)
	}
	if qs := e.listQueues(); !qs[0].Paused || !qs[0].PausedAt.Equal(*p.PausedAt) || qs[1].Paused {
		t.Errorf("queues after pause: %+v", qs)
	}
	// A queue with no job yet, with a name that needs escaping.
	if q := e.setPaused("later%3Fv2%20%C3%BC%23x", "pause"); q.Name != "later?v2 ü#x" || !q.Paused || q.Jobs["pending"] != 0 {
		t.Errorf("pause of a new queue: %+v", q)
	}
	if qs := e.listQueues(); len(qs) != 3 || qs[1].Name != "later?v2 ü#x" || !qs[1].Paused || qs[2].Name != "mail" {
		t.Errorf("queues: %+v", qs)
	}

	// A name outside the character set of names is refused.
	wantErr(t, e.do("POST", "/v1/queues/a%2Fb/pause", ""), 400, "invalid", "name")
	wantErr(t, e.do("POST", "/v1/queues/%E2%80%AEevil/pause", ""), 400, "invalid", "name")

	r := e.do("POST", "/v1/queues/mail/resume", "")
	if want := `{"queue":{"name":"mail","paused":false,"paused_at":null,` +
		`"jobs":{"canceled":0,"completed":0,"dead":1,"pending":0,"running":0,"scheduled":0},` +
		`"oldest_due_at":null,"latency_ms":0,"unconsumed":false}}` + "\n"; string(r.body) != want {
		t.Errorf("resume: %d %s\nwant %s", r.status, r.body, want)
	}
	if q := e.setPaused("default", "resume"); q.Paused || q.PausedAt != nil {
		t.Errorf("resume: %+v", q)
	}
	if q := e.setPaused("default", "resume"); q.Paused {
		t.Errorf("resume again: %+v", q)
	}
	// The API's pauses are the store's.
	states, err := e.st.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 || states[0].Paused || !states[1].Paused || states[2].Paused {
		t.Errorf("store queues: %+v", states)
	}
}

func TestQueuesAuth(t *testing.T) {
	e := newEnv(t, Options{Token: "t"})
	for _, tok := range []string{"", "wrong"} {
		e.token = tok
		for _, rt := range [][2]string{{"GET", "/v1/queues"}, {"POST", "/v1/queues/default/pause"}, {"POST", "/v1/queues/default/resume"}} {
			wantErr(t, e.do(rt[0], rt[1], ""), 401, "unauthorized", "")
		}
	}
	e.token = "t"
	if qs := e.listQueues(); len(qs) != 0 {
		t.Errorf("an unauthorized pause took effect: %+v", qs)
	}
}

func TestQueuesBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	long := strings.Repeat("q", 201)
	for _, name := range []string{"%01", "a%0Ab", "%FF", long} {
		for _, action := range []string{"pause", "resume"} {
			wantErr(t, e.do("POST", "/v1/queues/"+name+"/"+action, ""), 400, "invalid", "name")
		}
	}
	// 200 bytes is the limit, as for enqueue.
	e.setPaused(strings.Repeat("q", 200), "pause")
	// No body, no query parameters.
	wantErr(t, e.do("POST", "/v1/queues/default/pause", `{"paused":true}`), 400, "unknown_field", "paused")
	wantErr(t, e.do("GET", "/v1/queues?state=pending", ""), 400, "invalid", "state")
	// Wrong methods and routes.
	if r := e.do("GET", "/v1/queues/default/pause", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET pause: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/queues/default/stop", ""); r.status != http.StatusNotFound {
		t.Errorf("POST stop: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/queues//pause", ""); r.status == http.StatusOK {
		t.Errorf("POST with an empty name: %d %s", r.status, r.body)
	}
	// Nothing but the 200-byte queue was paused.
	qs := e.listQueues()
	if len(qs) != 1 || qs[0].Name != strings.Repeat("q", 200) {
		t.Errorf("queues after bad input: %+v", qs)
	}
	// The client refuses an empty name too, for callers of the library.
	if _, err := e.client.PauseQueue(context.Background(), ""); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("PauseQueue(\"\"): %v, want ErrInvalid", err)
	}
}
