package server

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestCancelJobs: POST /v1/jobs/cancel starts a cancel operation that
// the worker runs: it cancels the pending and scheduled jobs matching the
// filter (payload match included) and leaves running jobs alone; by ids,
// those that are not pending or scheduled are skipped; bad input names
// its field.
func TestCancelJobs(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	var want []int64
	for i := range 4 {
		opts := []redrive.Option{redrive.InQueue("cq")}
		if i%2 == 1 {
			opts = append(opts, redrive.At(time.Now().Add(time.Hour)))
		}
		j, err := e.client.Enqueue(ctx, "index", map[string]any{"customer_id": 42, "n": i}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, j.ID)
	}
	other, err := e.client.Enqueue(ctx, "index", map[string]any{"customer_id": 7}, redrive.InQueue("cq"))
	if err != nil {
		t.Fatal(err)
	}
	running, err := e.client.Enqueue(ctx, "index", map[string]any{"customer_id": 42}, redrive.InQueue("busy"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "busy", Limit: 1, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	e.runWorker()
	var ob operationBody
	e.want(e.do("POST", "/v1/jobs/cancel?wait=true", `{"filter":{"payload_field":"customer_id","payload_value":42},"batch":1,"note":"stop"}`), 200, &ob)
	op := ob.Operation
	if op.Kind != OperationCancel || op.State != OperationDone || op.Matched != 4 || op.Canceled != 4 || op.Processed != 4 {
		t.Fatalf("cancel: %+v", op)
	}
	for _, id := range want {
		var j redrive.Job
		e.want(e.do("GET", "/v1/jobs/"+strconv.FormatInt(id, 10), ""), 200, &j)
		if j.State != redrive.Canceled || j.History[len(j.History)-1].Note != "stop" {
			t.Errorf("job %d: %s %+v", id, j.State, j.History)
		}
	}
	for _, id := range []int64{other.ID, running.ID} {
		var j redrive.Job
		e.want(e.do("GET", "/v1/jobs/"+strconv.FormatInt(id, 10), ""), 200, &j)
		if j.State == redrive.Canceled || j.CancelRequested {
			t.Errorf("job %d outside the selection: %s (cancel requested %v)", id, j.State, j.CancelRequested)
		}
	}
	// By ids: the running job and a canceled one are skipped.
	e.want(e.do("POST", "/v1/jobs/cancel?wait=true", `{"ids":[`+strconv.FormatInt(other.ID, 10)+`,`+strconv.FormatInt(running.ID, 10)+`,`+strconv.FormatInt(want[0], 10)+`]}`), 200, &ob)
	if op := ob.Operation; op.Canceled != 1 || op.Skipped != 2 || op.State != OperationDone {
		t.Fatalf("cancel by ids: %+v", op)
	}
	for body, field := range map[string]string{
		`{}`:                                 "ids",
		`{"filter":{}}`:                      "filter",
		`{"filter":{"states":["running"]}}`:  "filter.states",
		`{"filter":{"states":["dead"]}}`:     "filter.states",
		`{"ids":[1],"filter":{"queue":"q"}}`: "filter",
		`{"ids":[0]}`:                        "ids",
		`{"ids":[1],"all":true}`:             "all",
		`{"all":true,"batch":5000}`:          "batch",
		`{"all":true,"rate":-1}`:             "rate",
		`{"filter":{"payload_field":"a b","payload_value":1}}`: "filter.payload_field",
	} {
		r := e.do("POST", "/v1/jobs/cancel", body)
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
