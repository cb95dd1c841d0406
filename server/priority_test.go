package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestPriority: priority is set by POST /v1/jobs and the batch endpoint,
// shown on the job, and changed on a waiting job by POST
// /v1/jobs/{id}/priority; out of range, not an integer or missing is 400
// on the field, and nothing is stored; a running job is 409, an unknown
// one 404.
func TestPriority(t *testing.T) {
	e := newEnv(t, Options{})
	var j redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","priority":42}`), 201, &j)
	if j.Priority != 42 {
		t.Fatalf("enqueued with priority 42: %+v", j)
	}
	var got redrive.Job
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", j.ID), ""), 200, &got)
	if got.Priority != 42 {
		t.Errorf("GET: priority %d, want 42", got.Priority)
	}
	var batch struct{ Jobs []redrive.Job }
	e.want(e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k","priority":-100},{"kind":"k"}]}`), 201, &batch)
	if len(batch.Jobs) != 2 || batch.Jobs[0].Priority != -100 || batch.Jobs[1].Priority != 0 {
		t.Errorf("batch: %+v", batch.Jobs)
	}

	before, err := e.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, code, field string }{
		{`{"kind":"k","priority":101}`, "invalid", "priority"},
		{`{"kind":"k","priority":-101}`, "invalid", "priority"},
		{`{"kind":"k","priority":1.5}`, "invalid_type", "priority"},
		{`{"kind":"k","priority":"high"}`, "invalid_type", "priority"},
		{`{"kind":"k","priority":1e40}`, "invalid_type", "priority"},
	} {
		wantErr(t, e.do("POST", "/v1/jobs", c.body), 400, c.code, c.field)
	}
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k"},{"kind":"k","priority":500}]}`), 400, "invalid", "jobs[1].priority")
	after, err := e.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n, m := before.Jobs[redrive.DefaultQueue][store.Pending], after.Jobs[redrive.DefaultQueue][store.Pending]; n != m {
		t.Errorf("refused enqueues stored jobs: %d pending before, %d after", n, m)
	}

	path := fmt.Sprintf("/v1/jobs/%d/priority", j.ID)
	var changed redrive.Job
	e.want(e.do("POST", path, `{"priority":-5}`), 200, &changed)
	if changed.ID != j.ID || changed.Priority != -5 {
		t.Errorf("changed: %+v", changed)
	}
	wantErr(t, e.do("POST", path, `{}`), 400, "invalid", "priority")
	wantErr(t, e.do("POST", path, `{"priority":1000}`), 400, "invalid", "priority")
	wantErr(t, e.do("POST", path, `{"priority":"1"}`), 400, "invalid_type", "priority")
	wantErr(t, e.do("POST", path, `{"priority":1,"x":1}`), 400, "unknown_field", "x")
	wantErr(t, e.do("POST", "/v1/jobs/99999/priority", `{"priority":1}`), 404, "not_found", "id")
	now := time.Now()
	if _, err := e.client.Store().Fetch(context.Background(), store.FetchParams{Queue: redrive.DefaultQueue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do("POST", path, `{"priority":1}`), 409, "conflict", "")
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", j.ID), ""), 200, &got)
	if got.Priority != -5 || got.State != redrive.Running {
		t.Errorf("after the refusals: %s, priority %d; want running, -5", got.State, got.Priority)
	}
}
