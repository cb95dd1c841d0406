package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// diamond is a workflow A -> B, C -> D with a success callback.
const diamond = `{"name":"diamond","idempotency_key":"order-7","on_dead":"cancel","jobs":[
	{"name":"A","kind":"email","payload":{"n":1}},
	{"name":"B","kind":"email","after":["A"]},
	{"name":"C","kind":"email","after":["A"],"queue":"mail","priority":3},
	{"name":"D","kind":"email","after":["B","C"]}],
	"on_success":{"kind":"notify","payload":{"to":"ada@example.com"}}}`

// workflowCount is how many workflows the store holds.
func workflowCount(t *testing.T, e *env) int {
	t.Helper()
	n := 0
	before := int64(0)
	for {
		ws, next, err := e.st.ListWorkflows(context.Background(), before, store.MaxPageSize)
		if err != nil {
			t.Fatal(err)
		}
		n += len(ws)
		if next == 0 {
			return n
		}
		before = next
	}
}

// TestWorkflowAPI: a workflow is created (201, its Location), created
// once per key (200, existing), read with its jobs' states and counts,
// listed by pages without its jobs, and canceled; the cancel is in the
// audit log, the enqueue is not (as other enqueues).
func TestWorkflowAPI(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	r := e.do("POST", "/v1/workflows", diamond)
	var w redrive.WorkflowInfo
	e.want(r, http.StatusCreated, &w)
	if loc := r.header.Get("Location"); loc != fmt.Sprintf("/v1/workflows/%d", w.ID) {
		t.Errorf("Location %q for workflow %d", loc, w.ID)
	}
	if w.Name != "diamond" || w.OnDead != redrive.CancelOnDead || w.State != store.WorkflowActive || w.Total != 4 ||
		len(w.Jobs) != 4 || w.OnSuccess == 0 || w.IdempotencyKey != "order-7" || w.Existing {
		t.Fatalf("created: %+v", w)
	}
	byName := map[string]store.WorkflowJob{}
	for _, j := range w.Jobs {
		byName[j.Name] = j
	}
	if byName["A"].State != redrive.Pending || byName["B"].State != store.Blocked || byName["D"].State != store.Blocked ||
		len(byName["D"].After) != 2 || byName["B"].After[0] != byName["A"].JobID {
		t.Errorf("jobs: %+v", w.Jobs)
	}
	// Each request's fields are kept.
	c, err := e.client.Get(t.Context(), byName["C"].JobID)
	if err != nil || c.Queue != "mail" || c.Priority != 3 {
		t.Errorf("job C: %+v, %v", c, err)
	}
	cb, err := e.client.Get(t.Context(), w.OnSuccess)
	if err != nil || cb.Kind != "notify" || cb.State != store.Blocked {
		t.Errorf("the success callback: %+v, %v", cb, err)
	}

	// The key: the same workflow, nothing more stored.
	var again redrive.WorkflowInfo
	e.want(e.do("POST", "/v1/workflows", diamond), http.StatusOK, &again)
	if again.ID != w.ID || !again.Existing {
		t.Errorf("second enqueue with the key: %+v", again)
	}
	// Given by the header too, and refused when it differs from the field.
	e.want(e.do("POST", "/v1/workflows", `{"jobs":[{"name":"x","kind":"email"}]}`, "Idempotency-Key", "order-7"), http.StatusOK, &again)
	if again.ID != w.ID {
		t.Errorf("the key by header: %+v", again)
	}
	wantErr(t, e.do("POST", "/v1/workflows", `{"idempotency_key":"a","jobs":[{"name":"x","kind":"email"}]}`, "Idempotency-Key", "b"),
		http.StatusBadRequest, "invalid", "idempotency_key")
	if n := workflowCount(t, e); n != 1 {
		t.Fatalf("%d workflows, want 1", n)
	}

	var got redrive.WorkflowInfo
	e.want(e.do("GET", fmt.Sprintf("/v1/workflows/%d", w.ID), ""), http.StatusOK, &got)
	if got.Counts[redrive.Pending] != 1 || got.Counts[store.Blocked] != 3 || len(got.Jobs) != 4 || got.State != store.WorkflowActive {
		t.Errorf("get: %+v", got)
	}

	// Pages: three more workflows, listed two by two, newest first.
	for i := range 3 {
		e.want(e.do("POST", "/v1/workflows", fmt.Sprintf(`{"name":"w%d","jobs":[{"name":"only","kind":"email"}]}`, i)), http.StatusCreated, nil)
	}
	var ids []int64
	before := ""
	for page := 0; ; page++ {
		path := "/v1/workflows?limit=2"
		if before != "" {
			path += "&before=" + before
		}
		var l WorkflowList
		e.want(e.do("GET", path, ""), http.StatusOK, &l)
		for _, x := range l.Workflows {
			if x.Jobs != nil {
				t.Errorf("a listing carries the jobs of workflow %d", x.ID)
			}
			if x.Counts == nil {
				t.Errorf("a listing lacks the counts of workflow %d", x.ID)
			}
			ids = append(ids, x.ID)
		}
		if l.Next == "" {
			break
		}
		if page > 3 {
			t.Fatal("the pages do not end")
		}
		before = l.Next
	}
	if len(ids) != 4 || ids[0] <= ids[1] || ids[3] != w.ID {
		t.Errorf("listed %v", ids)
	}
	wantErr(t, e.do("GET", "/v1/workflows?before=x", ""), http.StatusBadRequest, "invalid", "before")
	wantErr(t, e.do("GET", "/v1/workflows?limit=0", ""), http.StatusBadRequest, "invalid", "limit")

	// Cancel: its waiting jobs and the callback are canceled.
	var canceled redrive.WorkflowInfo
	e.want(e.do("POST", fmt.Sprintf("/v1/workflows/%d/cancel", w.ID), ""), http.StatusOK, &canceled)
	if canceled.State != store.WorkflowCanceled || canceled.Canceled != 4 || canceled.CanceledAt == nil {
		t.Errorf("canceled: %+v", canceled)
	}
	if cb, err := e.client.Get(t.Context(), w.OnSuccess); err != nil || cb.State != redrive.Canceled {
		t.Errorf("the callback after the cancel: %+v, %v", cb, err)
	}
	wantErr(t, e.do("POST", fmt.Sprintf("/v1/workflows/%d/cancel", w.ID), `{"x":1}`), http.StatusBadRequest, "unknown_field", "x")

	// The audit log: the cancel, as the token, with the workflow's id.
	entries, _, err := e.st.ListAudit(t.Context(), store.AuditFilter{}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Action != "POST /v1/workflows/{id}/cancel" || entries[0].Actor != LegacyTokenName ||
		!strings.Contains(entries[0].Target, fmt.Sprintf(`"id":"%d"`, w.ID)) || entries[0].Count != 4 {
		t.Errorf("audit log: %+v", entries)
	}

	// Unknown and bad ids.
	wantErr(t, e.do("GET", "/v1/workflows/999", ""), http.StatusNotFound, "not_found", "id")
	wantErr(t, e.do("POST", "/v1/workflows/999/cancel", ""), http.StatusNotFound, "not_found", "id")
	wantErr(t, e.do("GET", "/v1/workflows/x", ""), http.StatusBadRequest, "invalid", "id")
	wantErr(t, e.do("GET", "/v1/workflows/0", ""), http.StatusBadRequest, "invalid", "id")
}

// TestWorkflowRoles: the read role reads workflows and may not create or
// cancel one; the operate role may.
func TestWorkflowRoles(t *testing.T) {
	e := newEnv(t, roleOptions())
	as := func(role Role) []string { return []string{"Authorization", "Bearer " + roleTokens[role]} }
	body := `{"jobs":[{"name":"a","kind":"email"}]}`
	wantErr(t, e.do("POST", "/v1/workflows", body, as(RoleRead)...), http.StatusForbidden, "forbidden", "")
	r := e.do("POST", "/v1/workflows", body, as(RoleOperate)...)
	var w redrive.WorkflowInfo
	e.want(r, http.StatusCreated, &w)
	path := fmt.Sprintf("/v1/workflows/%d", w.ID)
	e.want(e.do("GET", path, "", as(RoleRead)...), http.StatusOK, nil)
	e.want(e.do("GET", "/v1/workflows", "", as(RoleRead)...), http.StatusOK, nil)
	wantErr(t, e.do("POST", path+"/cancel", "", as(RoleRead)...), http.StatusForbidden, "forbidden", "")
	e.want(e.do("POST", path+"/cancel", "", as(RoleOperate)...), http.StatusOK, nil)
}

// TestWorkflowBadInput: every kind of bad workflow is refused with 400
// naming the field and what is wrong (the unknown references, the
// cycle), and nothing is stored.
func TestWorkflowBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	registerWorker(t, e.st, "serve", map[string]int{"default": 1}, "email")
	many := make([]string, MaxWorkflowJobs+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"name":"j%d","kind":"email"}`, i)
	}
	for _, c := range []struct {
		name, body, code, field string
		says                    []string
	}{
		{"empty", `{}`, "invalid", "jobs", []string{"at least one job"}},
		{"no jobs", `{"jobs":[]}`, "invalid", "jobs", nil},
		{"too many jobs", `{"jobs":[` + strings.Join(many, ",") + `]}`, "invalid", "jobs", []string{"10001 jobs", "10000"}},
		{"no name", `{"jobs":[{"kind":"email"}]}`, "invalid", "jobs[0].name", []string{"no name"}},
		{"blank name", `{"jobs":[{"name":" a","kind":"email"}]}`, "invalid", "jobs[0].name", []string{"white space"}},
		{"control name", `{"jobs":[{"name":"a\u0007","kind":"email"}]}`, "invalid", "jobs[0].name", []string{"control"}},
		{"long name", `{"jobs":[{"name":"` + strings.Repeat("n", 201) + `","kind":"email"}]}`, "invalid", "jobs[0].name", []string{"201 bytes"}},
		{"duplicate name", `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email"},{"name":"a","kind":"email"}]}`,
			"invalid", "jobs[2].name", []string{`\"a\" is used twice`, "jobs[0]", "jobs[2]"}},
		{"unknown references", `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","after":["x","a"]},{"name":"c","kind":"email","after":["y"]}]}`,
			"invalid", "jobs[1].after", []string{"b -> x", "c -> y"}},
		{"after twice", `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","after":["a","a"]}]}`, "invalid", "jobs[1].after", []string{"twice"}},
		{"cycle", `{"jobs":[{"name":"a","kind":"email","after":["c"]},{"name":"b","kind":"email","after":["a"]},{"name":"c","kind":"email","after":["b"]},{"name":"d","kind":"email"}]}`,
			"invalid", "jobs", []string{"cycle", "a -> b -> c -> a"}},
		{"self", `{"jobs":[{"name":"a","kind":"email","after":["a"]}]}`, "invalid", "jobs", []string{"a -> a"}},
		{"on_dead", `{"on_dead":"retry","jobs":[{"name":"a","kind":"email"}]}`, "invalid", "on_dead", []string{"wait, cancel or run"}},
		{"job key twice", `{"jobs":[{"name":"a","kind":"email","idempotency_key":"k"},{"name":"b","kind":"email","idempotency_key":"k"}]}`,
			"invalid", "jobs[1].idempotency_key", []string{"jobs[0] and jobs[1]"}},
		{"job return_existing", `{"jobs":[{"name":"a","kind":"email","return_existing":true}]}`, "invalid", "jobs[0].return_existing", nil},
		{"callback key", `{"jobs":[{"name":"a","kind":"email"}],"on_death":{"kind":"email","idempotency_key":"k"}}`, "invalid", "on_death.idempotency_key", nil},
		{"no kind", `{"jobs":[{"name":"a"}]}`, "invalid", "jobs[0].kind", nil},
		{"bad delay", `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"email","delay":"soon"}]}`, "invalid", "jobs[1].delay", nil},
		{"bad callback", `{"jobs":[{"name":"a","kind":"email"}],"on_complete":{"kind":"email","priority":1000}}`, "invalid", "on_complete.priority", nil},
		{"unknown kind", `{"jobs":[{"name":"a","kind":"email"},{"name":"b","kind":"sms"}]}`, "unknown_kind", "jobs[1].kind", []string{`kind \"sms\"`}},
		{"unknown callback kind", `{"jobs":[{"name":"a","kind":"email"}],"on_success":{"kind":"email"},"on_death":{"kind":"pager"}}`,
			"unknown_kind", "on_death.kind", nil},
		{"unknown field", `{"jobs":[{"name":"a","kind":"email","colour":"red"}]}`, "unknown_field", "colour", nil}, // encoding/json names the key alone, as in a batch
		{"duplicate key", `{"jobs":[{"name":"a","kind":"email","name":"b"}]}`, "duplicate_key", "jobs[0].name", nil},
		{"duplicate key in a payload", `{"jobs":[{"name":"a","kind":"email","payload":{"x":1,"x":2}}]}`, "duplicate_key", "jobs[0].payload.x", nil},
		{"case", `{"Jobs":[{"name":"a","kind":"email"}]}`, "unknown_field", "Jobs", nil},
		{"type", `{"jobs":[{"name":"a","kind":"email","after":"b"}]}`, "invalid_type", "jobs.after", nil},
		{"long workflow name", `{"name":"` + strings.Repeat("n", 201) + `","jobs":[{"name":"a","kind":"email"}]}`, "invalid", "name", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/v1/workflows", c.body)
			wantErr(t, r, http.StatusBadRequest, c.code, c.field)
			var eb errorBody
			_ = json.Unmarshal(r.body, &eb)
			for _, s := range c.says {
				s = strings.ReplaceAll(s, `\"`, `"`)
				if !strings.Contains(eb.Error.Message, s) {
					t.Errorf("the message %q does not say %q", eb.Error.Message, s)
				}
			}
		})
	}
	if n, w := jobCount(t, e), workflowCount(t, e); n != 0 || w != 0 {
		t.Fatalf("refused workflows stored %d jobs, %d workflows", n, w)
	}
}

// TestDecodeWorkflow: the CLI's reading of a workflow file refuses what
// the API refuses, naming the field.
func TestDecodeWorkflow(t *testing.T) {
	in, err := DecodeWorkflow([]byte(diamond), time.Now())
	if err != nil || len(in.Jobs) != 4 || in.OnSuccess == nil || in.IdempotencyKey != "order-7" {
		t.Fatalf("diamond: %+v, %v", in, err)
	}
	for body, field := range map[string]string{
		`{"jobs":[{"name":"a","kind":"k","after":["b"]}]}`: "jobs[0].after",
		`{"jobs":[{"name":"a","kind":"k"}],"x":1}`:         "x",
		`{"jobs":[{"name":"a","kind":"k"}]} {}`:            "",
		"\xff":                                             "",
	} {
		_, err := DecodeWorkflow([]byte(body), time.Now())
		var ae *apiError
		if !errors.As(err, &ae) || ae.field != field {
			t.Errorf("%q: %v, want an error on field %q", body, err, field)
		}
		if field != "" && !strings.HasSuffix(err.Error(), "(field "+field+")") {
			t.Errorf("%q: %q does not name its field", body, err)
		}
	}
}

// FuzzWorkflowBody: no body panics the workflow parser or answers 5xx;
// a refused one (4xx) stores nothing, and an accepted one stores one
// workflow (or none: its key was taken) with the jobs it declares.
func FuzzWorkflowBody(f *testing.F) {
	for _, s := range []string{
		diamond,
		`{"jobs":[{"name":"a","kind":"k"}]}`,
		`{"jobs":[{"name":"a","kind":"k","after":["b"]},{"name":"b","kind":"k","after":["a"]}]}`,
		`{"jobs":[{"name":"a","kind":"k","after":["zz"]}]}`,
		`{"jobs":[{"name":"a","kind":"k"},{"name":"a","kind":"k"}]}`,
		`{"on_dead":"run","jobs":[{"name":"a","kind":"k","delay":"1h","max_retries":2}],"on_complete":{"kind":"c"}}`,
		`{"jobs":[{"name":"","kind":"k"}]}`,
		`{"jobs":[{"name":"a","kind":"k","idempotency_key":"x"}]}`,
		`{"jobs":[{"name":"a\u0000","kind":"k"}]}`,
		`{"jobs":[{"name":"a","kind":"k","payload":{"a":1,"a":2}}]}`,
		`{"jobs":null}`,
		`{"jobs":[null]}`,
		`{"on_success":null,"jobs":[{"name":"a","kind":"k","after":null}]}`,
		`[]`,
		``,
		`{"jobs":[{"name":"a","kind":"k"}]} trailing`,
	} {
		f.Add([]byte(s))
	}
	st := openStore(f)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	h := New(Options{Client: c, Logger: quiet, MaxBody: 64 << 10})
	f.Cleanup(func() { _ = h.Close() })
	counts := func(t *testing.T) (int64, int64) {
		jobs, err := st.Count(context.Background(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		ws, _, err := st.ListWorkflows(context.Background(), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		last := int64(0)
		if len(ws) > 0 {
			last = ws[0].ID
		}
		return jobs, last
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, last := counts(t)
		rec := fuzzPost(t, h, "/v1/workflows", body)
		jobsAfter, lastAfter := counts(t)
		switch {
		case rec.Code >= 400:
			if jobsAfter != jobs || lastAfter != last {
				t.Fatalf("refused (%d) body %q stored %d jobs, workflow %d", rec.Code, body, jobsAfter-jobs, lastAfter)
			}
		case rec.Code == http.StatusCreated:
			var w redrive.WorkflowInfo
			if err := json.Unmarshal(rec.Body.Bytes(), &w); err != nil {
				t.Fatal(err)
			}
			callbacks := int64(0)
			for _, id := range []int64{w.OnSuccess, w.OnComplete, w.OnDeath} {
				if id != 0 {
					callbacks++
				}
			}
			if lastAfter != w.ID || w.ID <= last || jobsAfter-jobs != w.Total+callbacks || int64(len(w.Jobs)) != w.Total {
				t.Fatalf("body %q answered %+v: %d jobs stored, last workflow %d", body, w, jobsAfter-jobs, lastAfter)
			}
		case rec.Code == http.StatusOK:
			if jobsAfter != jobs || lastAfter != last {
				t.Fatalf("an existing workflow's key (body %q) stored %d jobs", body, jobsAfter-jobs)
			}
		}
	})
}

// TestWorkflowAddAPI: POST /v1/workflows/{id}/jobs adds jobs depending
// on members and on each other (201, the workflow with them), and each
// refusal names the field at fault and stores nothing: a name used
// twice or taken, an after naming no job, a cycle, a dependency on a
// canceled member (409), an unknown workflow (404), and a canceled
// workflow (409, field id).
func TestWorkflowAddAPI(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	var w redrive.WorkflowInfo
	e.want(e.do("POST", "/v1/workflows", `{"jobs":[{"name":"A","kind":"email"},{"name":"K","kind":"email"}]}`), http.StatusCreated, &w)
	byName := func(w redrive.WorkflowInfo) map[string]store.WorkflowJob {
		out := map[string]store.WorkflowJob{}
		for _, j := range w.Jobs {
			out[j.Name] = j
		}
		return out
	}
	if _, err := e.client.Cancel(context.Background(), byName(w)["K"].JobID); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/v1/workflows/%d/jobs", w.ID)
	for _, c := range []struct {
		body, code, field string
		status            int
	}{
		{`{"jobs":[]}`, "invalid", "jobs", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email"},{"name":"B","kind":"email"}]}`, "invalid", "jobs[1].name", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email"},{"name":"A","kind":"email"}]}`, "invalid", "jobs[1].name", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email"},{"name":"C","kind":"email","after":["B","X"]}]}`, "invalid", "jobs[1].after", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email","after":["C"]},{"name":"C","kind":"email","after":["B"]}]}`, "invalid", "jobs", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email","return_existing":true}]}`, "invalid", "jobs[0].return_existing", http.StatusBadRequest},
		{`{"jobs":[{"name":"B","kind":"email"},{"name":"C","kind":"email","after":["A","K"]}]}`, "conflict", "jobs[1].after", http.StatusConflict},
	} {
		r := e.do("POST", path, c.body)
		wantErr(t, r, c.status, c.code, c.field)
	}
	wantErr(t, e.do("POST", "/v1/workflows/999/jobs", `{"jobs":[{"name":"B","kind":"email"}]}`), http.StatusNotFound, "not_found", "id")
	if got := e.do("GET", fmt.Sprintf("/v1/workflows/%d", w.ID), ""); !strings.Contains(string(got.body), `"total":2`) {
		t.Fatalf("the refused adds changed the workflow: %s", got.body)
	}
	e.want(e.do("POST", path, `{"jobs":[{"name":"C","kind":"email","after":["A","B"]},{"name":"B","kind":"email"}]}`), http.StatusCreated, &w)
	jobs := byName(w)
	if w.Total != 4 || jobs["B"].State != store.Pending || jobs["C"].State != store.Blocked || len(jobs["C"].After) != 2 {
		t.Fatalf("after the add: total %d, jobs %+v", w.Total, jobs)
	}
	e.want(e.do("POST", fmt.Sprintf("/v1/workflows/%d/cancel", w.ID), ""), http.StatusOK, nil)
	r := e.do("POST", path, `{"jobs":[{"name":"D","kind":"email"}]}`)
	wantErr(t, r, http.StatusConflict, "conflict", "id")
	if !strings.Contains(string(r.body), "canceled") {
		t.Errorf("the 409 does not name the state: %s", r.body)
	}
}

// TestWorkflowMemberKeysAPI: a job of a workflow (or of an add) whose
// idempotency key a job holds refuses the whole request, 409
// idempotency_conflict naming the job's field and the holder, nothing
// stored; a key free is taken by the job.
func TestWorkflowMemberKeysAPI(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	var held redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"email","idempotency_key":"k1"}`), http.StatusCreated, &held)
	r := e.do("POST", "/v1/workflows", `{"jobs":[{"name":"a","kind":"email","idempotency_key":"k2"},{"name":"b","kind":"email","idempotency_key":"k1"}]}`)
	wantErr(t, r, http.StatusConflict, "idempotency_conflict", "jobs[1].idempotency_key")
	if !strings.Contains(string(r.body), fmt.Sprintf("held by job %d", held.ID)) {
		t.Errorf("the 409 does not name the holder %d: %s", held.ID, r.body)
	}
	if n, w := jobCount(t, e), workflowCount(t, e); n != 1 || w != 0 {
		t.Fatalf("the refused workflow stored %d jobs, %d workflows", n-1, w)
	}
	var w redrive.WorkflowInfo
	e.want(e.do("POST", "/v1/workflows", `{"jobs":[{"name":"a","kind":"email","idempotency_key":"k2"}]}`), http.StatusCreated, &w)
	r = e.do("POST", fmt.Sprintf("/v1/workflows/%d/jobs", w.ID), `{"jobs":[{"name":"b","kind":"email"},{"name":"c","kind":"email","idempotency_key":"k2"}]}`)
	wantErr(t, r, http.StatusConflict, "idempotency_conflict", "jobs[1].idempotency_key")
	if n := jobCount(t, e); n != 2 {
		t.Fatalf("the refused add stored %d jobs", n-2)
	}
}
