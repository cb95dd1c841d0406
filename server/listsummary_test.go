package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// TestListSummaries: a listing gives each job a one-line summary (an http
// job's method and URL without its secrets, a payload excerpt otherwise)
// and leaves the history out, which the job itself and history=true
// still give; match selects jobs by a payload value as replay --match
// does.
func TestListSummaries(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	hook, err := e.client.Enqueue(ctx, "http", map[string]any{"method": "post", "url": "https://user:pw@example.com/hook?sig=abc",
		"headers": map[string]string{"Authorization": "Bearer s3cr3t"}})
	if err != nil {
		t.Fatal(err)
	}
	mail, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "ann@example.com", "customer_id": 42, "password": "s3cr3t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "bob@example.com", "customer_id": 7}); err != nil {
		t.Fatal(err)
	}
	dead := e.makeDead("graveyard", "boom", failure.Permanent)

	var page struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/jobs?limit=50", ""), http.StatusOK, &page)
	if len(page.Jobs) != 4 {
		t.Fatalf("%d jobs, want 4", len(page.Jobs))
	}
	summaries := map[int64]string{}
	for _, j := range page.Jobs {
		var id int64
		var s string
		_ = json.Unmarshal(j["id"], &id)
		_ = json.Unmarshal(j["summary"], &s)
		summaries[id] = s
		if _, ok := j["history"]; ok {
			t.Errorf("job %d of the listing has its history: %s", id, j["history"])
		}
		if strings.Contains(string(j["summary"]), "s3cr3t") || strings.Contains(string(j["summary"]), "sig=abc") {
			t.Errorf("job %d's summary shows a secret: %s", id, j["summary"])
		}
	}
	if want := "POST https://example.com/hook?***"; summaries[hook.ID] != want {
		t.Errorf("http job's summary %q, want %q", summaries[hook.ID], want)
	}
	if s := summaries[mail.ID]; !strings.Contains(s, `"to":"ann@example.com"`) || !strings.Contains(s, `"password":"***"`) {
		t.Errorf("email job's summary %q: want its payload without the password", s)
	}

	// The DLQ listing too; the job and history=true keep the history.
	var dlq struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/dlq", ""), http.StatusOK, &dlq)
	if len(dlq.Jobs) != 1 || dlq.Jobs[0]["history"] != nil || dlq.Jobs[0]["summary"] == nil {
		t.Errorf("DLQ listing: %v", dlq.Jobs)
	}
	var full struct {
		Jobs []redrive.Job `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/jobs?state=dead&history=true", ""), http.StatusOK, &full)
	if len(full.Jobs) != 1 || len(full.Jobs[0].History) == 0 {
		t.Errorf("history=true: %+v", full.Jobs)
	}
	var one struct {
		History []redrive.Event `json:"history"`
		Summary string          `json:"summary"`
	}
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", dead), ""), http.StatusOK, &one)
	if len(one.History) == 0 || one.Summary == "" {
		t.Errorf("GET /v1/jobs/{id}: history %v, summary %q", one.History, one.Summary)
	}
	wantErr(t, e.do("GET", "/v1/jobs?history=yes", ""), http.StatusBadRequest, "invalid", "history")

	// match: payload search, the CLI's --match syntax.
	var matched struct {
		Jobs []redrive.Job `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/jobs?match=payload.customer_id%3D42", ""), http.StatusOK, &matched)
	if len(matched.Jobs) != 1 || matched.Jobs[0].ID != mail.ID {
		t.Errorf("match=payload.customer_id=42: %+v, want job %d", matched.Jobs, mail.ID)
	}
	e.want(e.do("GET", "/v1/jobs?match=payload.to%3Dbob@example.com&kind=email", ""), http.StatusOK, &matched)
	if len(matched.Jobs) != 1 || matched.Jobs[0].ID == mail.ID {
		t.Errorf("match=payload.to=bob@example.com: %+v", matched.Jobs)
	}
	wantErr(t, e.do("GET", "/v1/jobs?match=customer_id%3D42", ""), http.StatusBadRequest, "invalid", "match")
	var n struct {
		Count int64 `json:"count"`
	}
	e.want(e.do("GET", "/v1/jobs/count?match=payload.customer_id%3D42", ""), http.StatusOK, &n)
	if n.Count != 1 {
		t.Errorf("GET /v1/jobs/count?match=payload.customer_id=42: %d, want 1", n.Count)
	}
	e.want(e.do("GET", "/v1/dlq/count?match=payload.msg%3Dboom", ""), http.StatusOK, &n)
	if n.Count != 1 {
		t.Errorf("GET /v1/dlq/count?match=payload.msg=boom: %d, want 1", n.Count)
	}
}

// TestRunNowAPI: POST /v1/jobs/{id}/run makes a scheduled job due at
// once (pending, its attempt unused); a pending job is answered as it
// is; a finished job is 409, an unknown one 404, a body 400.
func TestRunNowAPI(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	later, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "ann@example.com"}, redrive.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var j redrive.Job
	e.want(e.do("POST", fmt.Sprintf("/v1/jobs/%d/run", later.ID), ""), http.StatusOK, &j)
	if j.State != redrive.Pending || j.RunAt.After(time.Now()) || j.Attempt != 0 {
		t.Errorf("after run: %s due %s, attempt %d; want pending, due now, attempt 0", j.State, j.RunAt, j.Attempt)
	}
	e.want(e.do("POST", fmt.Sprintf("/v1/jobs/%d/run", later.ID), ""), http.StatusOK, &j)
	dead := e.makeDead("graveyard", "boom", failure.Permanent)
	wantErr(t, e.do("POST", fmt.Sprintf("/v1/jobs/%d/run", dead), ""), http.StatusConflict, "conflict", "")
	wantErr(t, e.do("POST", "/v1/jobs/999999/run", ""), http.StatusNotFound, "not_found", "id")
	wantErr(t, e.do("POST", fmt.Sprintf("/v1/jobs/%d/run", later.ID), `{"at":"now"}`), http.StatusBadRequest, "", "at")
}
