package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

var quiet = slog.New(slog.DiscardHandler)

type env struct {
	t      *testing.T
	srv    *httptest.Server
	api    *Server
	client *redrive.Client
	st     *sqlite.Store
	token  string
}

func openStore(tb testing.TB) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(tb), sqlite.Options{Logger: quiet, Synchronous: "normal"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	return newEnvOn(t, openStore(t), opts)
}

// newEnvOn serves the API on st, as one more process on the store would.
func newEnvOn(t *testing.T, st *sqlite.Store, opts Options) *env {
	t.Helper()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	opts.Client = c
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	api := New(opts)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() }) // first: stop the operations
	return &env{t: t, srv: srv, api: api, client: c, st: st, token: opts.Token}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.body)
	}
}

func (e *env) do(method, path, body string, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // the headers below may change it
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1] // the client sends this one, not a Host header
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// want checks the status and decodes the body into v (when not nil).
func (e *env) want(r resp, status int, v any) {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if v != nil {
		r.json(e.t, v)
	}
}

// wantErr checks an error answer: status, JSON shape, code and field.
func wantErr(t *testing.T, r resp, status int, code, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	checkErrorShape(t, r.header.Get("Content-Type"), r.body)
	var eb errorBody
	_ = json.Unmarshal(r.body, &eb)
	if code != "" && eb.Error.Code != code {
		t.Errorf("code %q, want %q: %s", eb.Error.Code, code, r.body)
	}
	if eb.Error.Field != field {
		t.Errorf("field %q, want %q: %s", eb.Error.Field, field, r.body)
	}
}

// checkErrorShape checks that body is exactly {"error": {"code", "message"[, "field"]}}.
func checkErrorShape(t testing.TB, contentType string, body []byte) {
	t.Helper()
	if !strings.HasPrefix(contentType, "application/json") {
		t.Fatalf("error Content-Type %q: %s", contentType, body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top["error"] == nil {
		t.Fatalf("error body is not {\"error\": ...}: %s", body)
	}
	for k := range top {
		// A batch with a key conflict also lists the jobs it enqueued.
		if k != "error" && k != "jobs" {
			t.Fatalf("error body has extra key %q: %s", k, body)
		}
	}
	var d map[string]any
	if err := json.Unmarshal(top["error"], &d); err != nil {
		t.Fatalf("error detail is not an object: %s", body)
	}
	code, _ := d["code"].(string)
	msg, _ := d["message"].(string)
	if code == "" || msg == "" {
		t.Fatalf("error without code or message: %s", body)
	}
	for k := range d {
		if k != "code" && k != "message" && k != "field" {
			t.Fatalf("error detail has extra key %q: %s", k, body)
		}
	}
}

// makeDead enqueues a job and buries it with the store, as a worker would.
func (e *env) makeDead(queue, msg string, class failure.Class, opts ...redrive.Option) int64 {
	e.t.Helper()
	ctx := context.Background()
	j, err := e.client.Enqueue(ctx, "dead-kind", map[string]string{"msg": msg}, append(opts, redrive.InQueue(queue))...)
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 1 || got[0].ID != j.ID {
		e.t.Fatalf("fetch: %v %v", got, err)
	}
	applied, err := e.st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: queue, Attempt: got[0].Attempt, Lease: got[0].Lease, Worker: "w",
		Kind: store.Bury, At: now, Class: class, DeadReason: class.String(), Fingerprint: class.String() + ":" + msg, Error: msg,
		Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: class.String(), Error: msg}}})
	if err != nil || !applied[0] {
		e.t.Fatalf("bury: %v %v", applied, err)
	}
	return j.ID
}

func TestHealthAndReady(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	e.token = "" // health checks need no token
	var m map[string]string
	e.want(e.do("GET", "/healthz", ""), 200, &m)
	if m["status"] != "ok" {
		t.Fatalf("healthz: %v", m)
	}
	e.want(e.do("GET", "/readyz", ""), 200, nil)
	_ = e.st.Close()
	wantErr(t, e.do("GET", "/readyz", ""), 503, "unavailable", "")
	e.want(e.do("GET", "/healthz", ""), 200, nil)
}

func TestAuth(t *testing.T) {
	e := newEnv(t, Options{Token: "s3cret"})
	for _, c := range []struct {
		name, header string
		status       int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer nope", 401},
		{"wrong scheme", "Basic s3cret", 401},
		{"prefix", "Bearer s3cre", 401},
		{"right", "Bearer s3cret", 200},
		{"lower-case scheme", "bearer s3cret", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.token = ""
			r := e.do("GET", "/v1/stats", "", "Authorization", c.header)
			if c.status == 401 {
				wantErr(t, r, 401, "unauthorized", "")
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			} else {
				e.want(r, c.status, nil)
			}
		})
	}
	e.token = ""
	// Unknown routes under /v1 need the token too; health checks do not.
	wantErr(t, e.do("GET", "/v1/nope", ""), 401, "unauthorized", "")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"x"}`), 401, "unauthorized", "")
	e.want(e.do("GET", "/healthz", ""), 200, nil)
	e.want(e.do("GET", "/readyz", ""), 200, nil)
}

func TestEnqueueGetList(t *testing.T) {
	e := newEnv(t, Options{})
	var j redrive.Job
	r := e.do("POST", "/v1/jobs", `{"kind":"email","payload":{"to":"a@example.com"},"queue":"mail","max_retries":2,"dependency":"smtp","not_reprocessable":true}`)
	e.want(r, 201, &j)
	if j.ID == 0 || j.Kind != "email" || j.Queue != "mail" || j.State != redrive.Pending || j.MaxRetries != 2 ||
		j.Dependency != "smtp" || j.Reprocessable || string(j.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("created job: %+v", j)
	}
	if loc := r.header.Get("Location"); loc != fmt.Sprintf("/v1/jobs/%d", j.ID) {
		t.Errorf("Location %q", loc)
	}
	var got redrive.Job
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", j.ID), ""), 200, &got)
	if got.ID != j.ID || got.History == nil {
		t.Fatalf("get: %+v", got)
	}
	var raw map[string]any
	e.do("GET", fmt.Sprintf("/v1/jobs/%d", j.ID), "").json(t, &raw)
	if _, ok := raw["history"]; !ok {
		t.Errorf("job JSON has no history: %v", raw)
	}
	// A job that never failed has no error class.
	if c, ok := raw["last_error_class"]; ok {
		t.Errorf("a job that never failed has last_error_class %v", c)
	}

	// Defaults, delay and run_at.
	var d, s, p redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","delay":"1h"}`), 201, &d)
	if d.State != redrive.Scheduled || d.Queue != redrive.DefaultQueue || string(d.Payload) != "null" {
		t.Errorf("delayed job: %+v", d)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","run_at":"`+at+`","payload":[1,2]}`), 201, &s)
	if s.State != redrive.Scheduled || s.RunAt.Format(time.RFC3339) != at {
		t.Errorf("scheduled job: %+v", s)
	}
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":"text"}`), 201, &p)

	// Listings: filters, pagination.
	var l listResponse
	e.want(e.do("GET", "/v1/jobs", ""), 200, &l)
	if len(l.Jobs) != 4 || l.Next != "" || l.Jobs[0].ID != p.ID {
		t.Fatalf("list all: %d jobs, next %q", len(l.Jobs), l.Next)
	}
	e.want(e.do("GET", "/v1/jobs?state=scheduled", ""), 200, &l)
	if len(l.Jobs) != 2 {
		t.Errorf("state=scheduled: %d jobs", len(l.Jobs))
	}
	e.want(e.do("GET", "/v1/jobs?state=scheduled,pending&queue=mail&kind=email", ""), 200, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != j.ID {
		t.Errorf("filtered list: %+v", l.Jobs)
	}
	seen := 0
	next := ""
	for page := 0; ; page++ {
		path := "/v1/jobs?limit=1"
		if next != "" {
			path += "&cursor=" + next
		}
		e.want(e.do("GET", path, ""), 200, &l)
		seen += len(l.Jobs)
		if l.Next == "" {
			break
		}
		next = l.Next
		if page > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if seen != 4 {
		t.Errorf("paged through %d jobs, want 4", seen)
	}
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t, Options{})
	var a, b, c redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":1}`, "Idempotency-Key", "key-1"), 201, &a)
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":1}`, "Idempotency-Key", "key-1"), 200, &b)
	if a.ID != b.ID || !b.Existing || a.IdempotencyKey != "key-1" {
		t.Fatalf("second enqueue: %+v, first %+v", b, a)
	}
	// The body field works the same way.
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":1,"idempotency_key":"key-1"}`), 200, &c)
	if c.ID != a.ID {
		t.Fatalf("body key: %d, want %d", c.ID, a.ID)
	}
	// Another payload under the key is a conflict, unless the caller asks
	// for the job holding it.
	r := e.do("POST", "/v1/jobs", `{"kind":"k","payload":2}`, "Idempotency-Key", "key-1")
	wantErr(t, r, 409, "idempotency_conflict", "idempotency_key")
	if !strings.Contains(string(r.body), fmt.Sprintf("held by job %d", a.ID)) {
		t.Errorf("the conflict does not name the job: %s", r.body)
	}
	var d redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":2,"return_existing":true}`, "Idempotency-Key", "key-1"), 200, &d)
	if d.ID != a.ID || !d.Conflict {
		t.Fatalf("return_existing: %+v", d)
	}
	// In a batch, the others are enqueued and listed with the error.
	r = e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k","payload":3},{"kind":"k","payload":4,"idempotency_key":"key-1"}]}`)
	wantErr(t, r, 409, "idempotency_conflict", "jobs[1].idempotency_key")
	var batch struct{ Jobs []redrive.Job }
	r.json(t, &batch)
	if len(batch.Jobs) != 2 || batch.Jobs[0].Existing || batch.Jobs[1].ID != a.ID || !batch.Jobs[1].Conflict {
		t.Fatalf("batch with a conflict: %+v", batch.Jobs)
	}
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k","idempotency_key":"other"}`, "Idempotency-Key", "key-1"), 400, "invalid", "idempotency_key")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Idempotency-Key", strings.Repeat("k", 600)), 400, "invalid", "idempotency_key")
}

func TestBatch(t *testing.T) {
	e := newEnv(t, Options{})
	var out struct {
		Jobs []*redrive.Job `json:"jobs"`
	}
	e.want(e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"a"},{"kind":"b","queue":"q2","delay":"5m"},{"kind":"c","idempotency_key":"x"}]}`), 201, &out)
	if len(out.Jobs) != 3 || out.Jobs[1].Queue != "q2" || out.Jobs[1].State != redrive.Scheduled {
		t.Fatalf("batch: %+v", out.Jobs)
	}
	n, _ := e.client.Count(context.Background(), redrive.Filter{})
	if n != 3 {
		t.Fatalf("%d jobs stored", n)
	}
	// A bad element names itself, and nothing is enqueued.
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"a"},{"queue":"q"}]}`), 400, "invalid", "jobs[1].kind")
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"a"},{"kind":"b","delay":"soon"}]}`), 400, "invalid", "jobs[1].delay")
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[]}`), 400, "invalid", "jobs")
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{}`), 400, "invalid", "jobs")
	big := `{"jobs":[` + strings.Repeat(`{"kind":"a"},`, MaxBatch) + `{"kind":"a"}]}`
	wantErr(t, e.do("POST", "/v1/jobs/batch", big), 400, "invalid", "jobs")
	if n2, _ := e.client.Count(context.Background(), redrive.Filter{}); n2 != n {
		t.Fatalf("a refused batch enqueued jobs: %d, want %d", n2, n)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, Options{MaxBody: 4096})
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"malformed JSON", "POST", "/v1/jobs", `{"kind":`, 400, "malformed_json", ""},
		{"syntax error", "POST", "/v1/jobs", `{"kind" "x"}`, 400, "malformed_json", ""},
		{"empty body", "POST", "/v1/jobs", ``, 400, "malformed_json", ""},
		{"trailing data", "POST", "/v1/jobs", `{"kind":"x"} {"kind":"y"}`, 400, "malformed_json", ""},
		{"unknown field", "POST", "/v1/jobs", `{"kind":"x","colour":"red"}`, 400, "unknown_field", "colour"},
		{"wrong type", "POST", "/v1/jobs", `{"kind":1}`, 400, "invalid_type", "kind"},
		{"wrong type int", "POST", "/v1/jobs", `{"kind":"x","max_retries":"3"}`, 400, "invalid_type", "max_retries"},
		{"array body", "POST", "/v1/jobs", `[1]`, 400, "invalid_type", ""},
		{"oversized body", "POST", "/v1/jobs", `{"kind":"x","payload":"` + strings.Repeat("a", 5000) + `"}`, 413, "body_too_large", ""},
		{"missing kind", "POST", "/v1/jobs", `{"payload":1}`, 400, "invalid", "kind"},
		{"long kind", "POST", "/v1/jobs", `{"kind":"` + strings.Repeat("k", 201) + `"}`, 400, "invalid", "kind"},
		{"control char", "POST", "/v1/jobs", `{"kind":"a\u0000b"}`, 400, "invalid", "kind"},
		{"bad run_at", "POST", "/v1/jobs", `{"kind":"x","run_at":"tomorrow"}`, 400, "invalid", "run_at"},
		{"bad delay", "POST", "/v1/jobs", `{"kind":"x","delay":"-5s"}`, 400, "invalid", "delay"},
		{"run_at and delay", "POST", "/v1/jobs", `{"kind":"x","delay":"5s","run_at":"2030-01-01T00:00:00Z"}`, 400, "invalid", "delay"},
		{"negative retries", "POST", "/v1/jobs", `{"kind":"x","max_retries":-1}`, 400, "invalid", "max_retries"},
		{"limit zero", "GET", "/v1/jobs?limit=0", "", 400, "invalid", "limit"},
		{"limit too big", "GET", "/v1/jobs?limit=1001", "", 400, "invalid", "limit"},
		{"limit not a number", "GET", "/v1/dlq?limit=ten", "", 400, "invalid", "limit"},
		{"groups limit", "GET", "/v1/dlq/groups?limit=5000", "", 400, "invalid", "limit"},
		{"bad state", "GET", "/v1/jobs?state=zombie", "", 400, "invalid", "state"},
		{"bad class", "GET", "/v1/dlq?class=flaky", "", 400, "invalid", "class"},
		{"bad since", "GET", "/v1/dlq?since=yesterday", "", 400, "invalid", "since"},
		{"until before since", "GET", "/v1/dlq?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", 400, "invalid", "until"},
		{"unknown parameter", "GET", "/v1/jobs?queu=x", "", 400, "invalid", "queu"},
		{"state on dlq", "GET", "/v1/dlq?state=pending", "", 400, "invalid", "state"},
		{"repeated parameter", "GET", "/v1/jobs?queue=a&queue=b", "", 400, "invalid", "queue"},
		{"bad cursor", "GET", "/v1/jobs?cursor=!!!", "", 400, "invalid", "cursor"},
		{"bad id", "GET", "/v1/jobs/abc", "", 400, "invalid", "id"},
		{"negative id", "POST", "/v1/jobs/-1/cancel", "", 400, "invalid", "id"},
		{"redrive nothing", "POST", "/v1/dlq/redrive", `{}`, 400, "filter_required", "ids"},
		{"redrive empty filter", "POST", "/v1/dlq/redrive", `{"filter":{}}`, 400, "filter_required", "filter"},
		{"redrive ids and filter", "POST", "/v1/dlq/redrive", `{"ids":[1],"filter":{"queue":"q"}}`, 400, "invalid", "filter"},
		{"redrive bad id", "POST", "/v1/dlq/redrive", `{"ids":[0]}`, 400, "invalid", "ids"},
		{"redrive bad rate", "POST", "/v1/dlq/redrive", `{"ids":[1],"rate":-1}`, 400, "invalid", "rate"},
		{"redrive bad filter class", "POST", "/v1/dlq/redrive", `{"filter":{"class":"nope"}}`, 400, "invalid", "filter.class"},
		{"redrive unknown filter field", "POST", "/v1/dlq/redrive", `{"filter":{"colour":"red"}}`, 400, "unknown_field", "colour"},
		{"redrive bad payload type", "POST", "/v1/dlq/redrive", `{"ids":"1"}`, 400, "invalid_type", "ids"},
		{"purge empty filter", "DELETE", "/v1/dlq", "", 400, "filter_required", "all"},
		{"purge all not bool", "DELETE", "/v1/dlq?all=yes", "", 400, "invalid", "all"},
		{"purge wait not bool", "DELETE", "/v1/dlq?queue=q&wait=1", "", 400, "invalid", "wait"},
		{"purge unknown parameter", "DELETE", "/v1/dlq?queue=q&rate=1", "", 400, "invalid", "rate"},
		{"redrive wait not bool", "POST", "/v1/dlq/redrive?wait=yes", `{"ids":[1]}`, 400, "invalid", "wait"},
		{"redrive unknown parameter", "POST", "/v1/dlq/redrive?all=true", `{"ids":[1]}`, 400, "invalid", "all"},
		{"redrive rate too small", "POST", "/v1/dlq/redrive", `{"ids":[1],"rate":0.01}`, 400, "invalid", "rate"},
		{"redrive long note", "POST", "/v1/dlq/redrive", `{"ids":[1],"note":"` + strings.Repeat("n", MaxNote+1) + `"}`, 400, "invalid", "note"},
		{"export bad class", "GET", "/v1/dlq/export?class=nope", "", 400, "invalid", "class"},
		{"export state", "GET", "/v1/dlq/export?state=dead", "", 400, "invalid", "state"},
		{"export limit", "GET", "/v1/dlq/export?limit=10", "", 400, "invalid", "limit"},
		{"operations limit", "GET", "/v1/operations?limit=0", "", 400, "invalid", "limit"},
		{"operations unknown parameter", "GET", "/v1/operations?state=running", "", 400, "invalid", "state"},
		{"operation parameter", "GET", "/v1/operations/op_1?wait=true", "", 400, "invalid", "wait"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, e.do(c.method, c.path, c.body), c.status, c.code, c.field)
		})
	}
}

func TestNotFoundAndMethod(t *testing.T) {
	e := newEnv(t, Options{})
	wantErr(t, e.do("GET", "/v1/nope", ""), 404, "not_found", "")
	wantErr(t, e.do("GET", "/v1", ""), 404, "not_found", "")
	wantErr(t, e.do("GET", "/v1/jobs/12345", ""), 404, "not_found", "id")
	wantErr(t, e.do("POST", "/v1/jobs/12345/cancel", ""), 404, "not_found", "id")
	wantErr(t, e.do("GET", "/elsewhere", ""), 404, "not_found", "")
	r := e.do("PUT", "/v1/stats", "")
	wantErr(t, r, 405, "method_not_allowed", "")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("Allow %q", allow)
	}
	wantErr(t, e.do("DELETE", "/v1/jobs", ""), 405, "method_not_allowed", "")
	wantErr(t, e.do("GET", "/v1/dlq/redrive", ""), 405, "method_not_allowed", "")
}

func TestCancel(t *testing.T) {
	e := newEnv(t, Options{})
	var j, c redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","delay":"1h"}`), 201, &j)
	e.want(e.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", j.ID), ""), 200, &c)
	if c.ID != j.ID || c.State != redrive.Canceled {
		t.Fatalf("canceled: %+v", c)
	}
	wantErr(t, e.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", j.ID), ""), 409, "conflict", "")
	wantErr(t, e.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", j.ID), `{"x":1}`), 400, "unknown_field", "x")
}

func TestDLQ(t *testing.T) {
	e := newEnv(t, Options{})
	e.runWorker() // runs the redrives and purges
	d1 := e.makeDead("orders", "card declined", failure.Permanent)
	d2 := e.makeDead("orders", "card declined", failure.Permanent)
	d3 := e.makeDead("mail", "401 unauthorized", failure.NeedsAuth)
	locked := e.makeDead("mail", "bad address", failure.Permanent, redrive.NotReprocessable())
	var pending redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k"}`), 201, &pending)

	var l listResponse
	e.want(e.do("GET", "/v1/dlq", ""), 200, &l)
	if len(l.Jobs) != 4 {
		t.Fatalf("dlq: %d jobs", len(l.Jobs))
	}
	for _, j := range l.Jobs {
		if j.State != redrive.Dead {
			t.Errorf("dlq lists a %s job", j.State)
		}
	}
	e.want(e.do("GET", "/v1/dlq?q=DECLINED&queue=orders&class=permanent&limit=1", ""), 200, &l)
	if len(l.Jobs) != 1 || l.Next == "" {
		t.Fatalf("filtered dlq page: %d jobs, next %q", len(l.Jobs), l.Next)
	}
	e.want(e.do("GET", "/v1/dlq?q=DECLINED&queue=orders&class=permanent&limit=1&cursor="+l.Next, ""), 200, &l)
	if len(l.Jobs) != 1 || l.Next != "" {
		t.Fatalf("second dlq page: %d jobs, next %q", len(l.Jobs), l.Next)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	e.want(e.do("GET", "/v1/dlq?class=needs_auth&since="+since, ""), 200, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != d3 {
		t.Fatalf("needs_auth: %+v", l.Jobs)
	}
	var raw map[string]any
	e.do("GET", fmt.Sprintf("/v1/jobs/%d", d3), "").json(t, &raw)
	if c := raw["last_error_class"]; c != "needs_auth" {
		t.Errorf("dead job: last_error_class %v, want needs_auth", c)
	}
	// "none" names no failure class: refused as a filter.
	if r := e.do("GET", "/v1/dlq?class=none", ""); r.status != 400 || !strings.Contains(string(r.body), `"field":"class"`) {
		t.Errorf("class=none: %d %s, want 400 naming the class field", r.status, r.body)
	}

	var g struct {
		Groups []redrive.Group `json:"groups"`
	}
	e.want(e.do("GET", "/v1/dlq/groups", ""), 200, &g)
	if len(g.Groups) != 3 || g.Groups[0].Count != 2 || g.Groups[0].Queue != "orders" {
		t.Fatalf("groups: %+v", g.Groups)
	}
	e.want(e.do("GET", "/v1/dlq/groups?queue=mail&limit=1", ""), 200, &g)
	if len(g.Groups) != 1 || g.Groups[0].Queue != "mail" {
		t.Fatalf("mail groups: %+v", g.Groups)
	}

	// Redrive by ids, with a replacement payload and a note; a
	// not-reprocessable job is refused, a missing one skipped.
	var ob operationBody
	e.want(e.do("POST", "/v1/dlq/redrive?wait=true", fmt.Sprintf(`{"ids":[%d,%d,999999],"payload":{"fixed":true},"note":"ops: card fixed"}`, d1, locked)), 200, &ob)
	if p := ob.Operation; p.State != OperationDone || p.Matched != 3 || p.Redriven != 1 || p.Refused != 1 || p.Skipped != 1 ||
		p.Processed != 3 || len(p.RefusedIDs) != 1 || p.RefusedIDs[0] != locked || p.Note != "ops: card fixed" {
		t.Fatalf("redrive by ids: %+v", p)
	}
	var j redrive.Job
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", d1), ""), 200, &j)
	if j.State != redrive.Pending || string(j.Payload) != `{"fixed":true}` || j.Redriven != 1 {
		t.Fatalf("redriven job: %+v", j)
	}
	if last := j.History[len(j.History)-1]; last.Kind != store.EventRedriven || last.Note != "ops: card fixed" {
		t.Errorf("last event: %+v", last)
	}

	// Redrive by filter, rate-bounded: 202, then polled to its end.
	p := e.await(e.start("POST", "/v1/dlq/redrive", `{"filter":{"queue":"orders","class":"permanent"},"rate":100}`))
	if p.State != OperationDone || p.Redriven != 1 || p.Kind != OperationRedrive || p.Rate != 100 {
		t.Fatalf("redrive by filter: %+v", p)
	}
	if j, _ := e.client.Get(context.Background(), d2); j.State != redrive.Pending {
		t.Errorf("job %d is %s after redrive by filter", d2, j.State)
	}

	// Purge: a filter, then everything.
	e.want(e.do("DELETE", "/v1/dlq?queue=nothing-here&wait=true", ""), 200, &ob)
	if ob.Operation.Purged != 0 || ob.Operation.State != OperationDone || ob.Operation.Kind != OperationPurge {
		t.Fatalf("purge of nothing: %+v", ob.Operation)
	}
	p = e.await(e.start("DELETE", "/v1/dlq?class=needs_auth", ""))
	if p.Purged != 1 || p.Matched != 1 || p.Processed != 1 || p.State != OperationDone {
		t.Fatalf("purge needs_auth: %+v", p)
	}
	wantErr(t, e.do("GET", fmt.Sprintf("/v1/jobs/%d", d3), ""), 404, "not_found", "id")
	e.want(e.do("DELETE", "/v1/dlq?all=true&wait=true", ""), 200, &ob)
	if ob.Operation.Purged != 1 {
		t.Fatalf("purge all: %+v", ob.Operation)
	}
	e.want(e.do("GET", "/v1/dlq", ""), 200, &l)
	if len(l.Jobs) != 0 {
		t.Fatalf("dlq after purge: %d jobs", len(l.Jobs))
	}
	// Purge never touches live jobs.
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", pending.ID), ""), 200, nil)

	// Redrive all (after all=true) of an empty DLQ.
	e.want(e.do("POST", "/v1/dlq/redrive?wait=true", `{"all":true}`), 200, &ob)
	if ob.Operation.State != OperationDone || ob.Operation.Matched != 0 {
		t.Fatalf("redrive all: %+v", ob.Operation)
	}
}

// TestRedriveWorkerDead makes a job dead through a real worker and a
// permanent error, then redrives it through the API.
func TestRedriveWorkerDead(t *testing.T) {
	e := newEnv(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{"wq": 1}, Logger: quiet})
	fail := make(chan bool, 10)
	fail <- true
	redrive.Handle(w, "boom", func(ctx context.Context, job *redrive.Job, v map[string]any) error {
		select {
		case <-fail:
			return redrive.Permanent(errors.New("no such customer"))
		default:
			return nil
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var j redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"boom","queue":"wq","payload":{}}`), 201, &j)
	waitState(t, e, j.ID, redrive.Dead)
	var l listResponse
	e.want(e.do("GET", "/v1/dlq?queue=wq&q=customer", ""), 200, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].LastErrorClass != failure.Permanent {
		t.Fatalf("dlq: %+v", l.Jobs)
	}
	if p := e.await(e.start("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, j.ID))); p.Redriven != 1 {
		t.Fatalf("redrive: %+v", p)
	}
	waitState(t, e, j.ID, redrive.Completed)
}

func waitState(t *testing.T, e *env, id int64, want redrive.State) {
	t.Helper()
	testwait.Watch(t, fmt.Sprintf("job %d to be %s", id, want), 10*time.Second, func() (bool, string) {
		var j redrive.Job
		e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", id), ""), 200, &j)
		return j.State == want, string(j.State)
	})
}

func TestStatsAndBreakers(t *testing.T) {
	e := newEnv(t, Options{})
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","queue":"s"}`), 201, nil)
	var s redrive.Stats
	e.want(e.do("GET", "/v1/stats", ""), 200, &s)
	if s.Jobs["s"][redrive.Pending] != 1 {
		t.Fatalf("stats: %+v", s)
	}
	var bs []map[string]any
	r := e.do("GET", "/v1/breakers", "")
	e.want(r, 200, &bs)
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("breakers without registry: %s", r.body)
	}

	reg := breaker.NewRegistry(breaker.DefaultConfig())
	reg.Get("payments")
	e2 := newEnv(t, Options{Breakers: reg})
	e2.want(e2.do("GET", "/v1/breakers", ""), 200, &bs)
	if len(bs) != 1 || bs[0]["name"] != "payments" || bs[0]["state"] != "closed" {
		t.Fatalf("breakers: %v", bs)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	// A nil client makes the store-backed handlers panic.
	srv := httptest.NewServer(New(Options{Logger: quiet}))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 500 {
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	checkErrorShape(t, res.Header.Get("Content-Type"), b)
}

func TestPayloadBound(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet, MaxPayload: 16})
	srv := httptest.NewServer(New(Options{Client: c, Logger: quiet}))
	defer srv.Close()
	e := &env{t: t, srv: srv, client: c, st: st}
	big := `"` + strings.Repeat("x", 32) + `"`
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k","payload":`+big+`}`), 400, "invalid", "payload")
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k"},{"kind":"k","payload":`+big+`}]}`), 400, "invalid", "jobs[1].payload")
	wantErr(t, e.do("POST", "/v1/dlq/redrive", `{"ids":[1],"payload":`+big+`}`), 400, "invalid", "payload")
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":{"a":1}}`), 201, nil)
}
