package server

import (
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// countOf reads a count route and checks the answer's exact shape.
func (e *env) countOf(path string) int64 {
	e.t.Helper()
	r := e.do("GET", path, "")
	var raw map[string]json.RawMessage
	e.want(r, 200, &raw)
	if len(raw) != 1 || raw["count"] == nil {
		e.t.Fatalf("%s: answer is not {\"count\": n}: %s", path, r.body)
	}
	var c CountResponse
	r.json(e.t, &c)
	return c.Count
}

// listedOf counts the jobs a listing returns over all its pages.
func (e *env) listedOf(path string, filter url.Values) int64 {
	e.t.Helper()
	var n int64
	q := url.Values{}
	for k, v := range filter {
		q[k] = v
	}
	q.Set("limit", "2")
	for {
		var l listResponse
		e.want(e.do("GET", path+"?"+q.Encode(), ""), 200, &l)
		n += int64(len(l.Jobs))
		if l.Next == "" {
			return n
		}
		q.Set("cursor", l.Next)
	}
}

func TestCount(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	e.makeDead("orders", "card declined", failure.Permanent)
	e.makeDead("orders", "card declined", failure.Permanent)
	e.makeDead("orders", "gateway timeout", failure.Transient)
	e.makeDead("mail", "401 unauthorized", failure.NeedsAuth)
	for range 3 {
		e.want(e.do("POST", "/v1/jobs", `{"kind":"email","queue":"mail"}`), 201, nil)
	}
	e.want(e.do("POST", "/v1/jobs", `{"kind":"sms","queue":"mail","delay":"1h"}`), 201, nil)
	var canceled redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"sms","queue":"orders"}`), 201, &canceled)
	e.want(e.do("POST", "/v1/jobs/"+strconv.FormatInt(canceled.ID, 10)+"/cancel", ""), 200, nil)

	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	inAnHour := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		query      string
		jobs, dead int64
	}{
		{"", 9, 4},
		{"queue=orders", 4, 3},
		{"queue=mail", 5, 1},
		{"queue=nope", 0, 0},
		{"kind=dead-kind", 4, 4},
		{"kind=email", 3, 0},
		{"class=permanent", 2, 2},
		{"class=needs_auth", 1, 1},
		{"reason=transient", 1, 1},
		{"fingerprint=permanent:card+declined", 2, 2},
		{"q=DECLINED", 2, 2},
		{"q=declined&queue=mail", 0, 0},
		{"since=" + url.QueryEscape(hourAgo), 9, 4},
		{"until=" + url.QueryEscape(hourAgo), 0, 0},
		{"since=" + url.QueryEscape(hourAgo) + "&until=" + url.QueryEscape(inAnHour) + "&queue=orders", 4, 3},
	} {
		t.Run("filter "+c.query, func(t *testing.T) {
			e.t = t
			q, err := url.ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.countOf("/v1/jobs/count?" + c.query); got != c.jobs {
				t.Errorf("jobs count %d, want %d", got, c.jobs)
			}
			if got := e.countOf("/v1/dlq/count?" + c.query); got != c.dead {
				t.Errorf("dlq count %d, want %d", got, c.dead)
			}
			// A count is what the listing with the same filter returns.
			if got, listed := e.countOf("/v1/jobs/count?"+c.query), e.listedOf("/v1/jobs", q); got != listed {
				t.Errorf("jobs count %d, listing %d", got, listed)
			}
			if got, listed := e.countOf("/v1/dlq/count?"+c.query), e.listedOf("/v1/dlq", q); got != listed {
				t.Errorf("dlq count %d, listing %d", got, listed)
			}
		})
	}
	e.t = t

	// States: one, a list, repeated; dead jobs count as dead.
	for _, c := range []struct {
		query string
		want  int64
	}{
		{"state=pending", 3},
		{"state=scheduled", 1},
		{"state=canceled", 1},
		{"state=dead", 4},
		{"state=completed", 0},
		{"state=pending,scheduled", 4},
		{"state=pending&state=dead&queue=mail", 4},
		{"state=dead&class=permanent", 2},
	} {
		if got := e.countOf("/v1/jobs/count?" + c.query); got != c.want {
			t.Errorf("jobs count ?%s: %d, want %d", c.query, got, c.want)
		}
	}

	// The DLQ count is what a purge by the same filter deletes (a worker
	// runs the purge).
	e.runWorker()
	n := e.countOf("/v1/dlq/count?queue=orders&class=permanent")
	op := e.await(e.start("DELETE", "/v1/dlq?queue=orders&class=permanent", ""))
	if op.State != OperationDone || op.Purged != n || n != 2 {
		t.Fatalf("purge of %d counted jobs: %+v", n, op)
	}
	if got := e.countOf("/v1/dlq/count?queue=orders"); got != 1 {
		t.Errorf("dlq count after the purge: %d", got)
	}
}

func TestCountBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	for _, c := range []struct {
		path, code, field string
		status            int
	}{
		{"/v1/jobs/count?nope=1", "invalid", "nope", 400},
		{"/v1/jobs/count?limit=10", "invalid", "limit", 400},
		{"/v1/jobs/count?cursor=abc", "invalid", "cursor", 400},
		{"/v1/jobs/count?state=bogus", "invalid", "state", 400},
		{"/v1/jobs/count?state=pending,bogus", "invalid", "state", 400},
		{"/v1/jobs/count?class=nonsense", "invalid", "class", 400},
		{"/v1/jobs/count?since=yesterday", "invalid", "since", 400},
		{"/v1/jobs/count?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "invalid", "until", 400},
		{"/v1/jobs/count?queue=a&queue=b", "invalid", "queue", 400},
		{"/v1/jobs/count?kind=%01", "invalid", "kind", 400},
		{"/v1/jobs/count?q=%ff", "invalid", "q", 400},
		{"/v1/jobs/count?%zz", "invalid", "", 400},
		{"/v1/dlq/count?state=dead", "invalid", "state", 400},
		{"/v1/dlq/count?limit=1", "invalid", "limit", 400},
		{"/v1/dlq/count?all=true", "invalid", "all", 400},
		{"/v1/dlq/count?until=soon", "invalid", "until", 400},
		{"/v1/dlq/count?reason=" + url.QueryEscape(string(make([]byte, 300))), "invalid", "reason", 400},
	} {
		wantErr(t, e.do("GET", c.path, ""), c.status, c.code, c.field)
	}
	// Counting is GET only.
	for _, p := range []string{"/v1/jobs/count", "/v1/dlq/count"} {
		r := e.do("DELETE", p, "")
		wantErr(t, r, 405, "method_not_allowed", "")
		if allow := r.header.Get("Allow"); allow == "" {
			t.Errorf("DELETE %s: 405 without Allow", p)
		}
	}
}

func TestCountAuth(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	e.makeDead("q", "boom", failure.Permanent)
	e.token = ""
	for _, p := range []string{"/v1/jobs/count", "/v1/dlq/count", "/v1/dlq/count?queue=q"} {
		wantErr(t, e.do("GET", p, ""), 401, "unauthorized", "")
		wantErr(t, e.do("GET", p, "", "Authorization", "Bearer wrong"), 401, "unauthorized", "")
	}
	e.token = "tok"
	if n := e.countOf("/v1/dlq/count?queue=q"); n != 1 {
		t.Errorf("count with the token: %d", n)
	}
}
