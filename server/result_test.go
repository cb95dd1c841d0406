package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/store"
)

// TestJobResultOverREST: the result a remote worker completes a job with
// reads back from GET /v1/jobs/{id}, masked like the payload (fields
// named like secrets, the payload's secrets it echoes; a result the
// mask would break shows the mask whole), in clear with reveal=true;
// the listing leaves it out.
func TestJobResultOverREST(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		const secret = "tok-8f3a9c"
		cases := []struct {
			result, masked string
		}{
			{`{"pages":3,"url":"s3://b/k"}`, `{"pages":3,"url":"s3://b/k"}`},
			{`{"pages":3,"password":"hunter22"}`, `{"pages":3,"password":"` + redact.Mask + `"}`},
			{`{"echo":"used ` + secret + ` once"}`, `{"echo":"used ` + redact.Mask + ` once"}`},
			{`[1,2]`, `[1,2]`},
		}
		ids := make([]int64, len(cases))
		for i := range cases {
			j, err := e.client.Enqueue(context.Background(), "k", map[string]string{"api_token": secret}, redrive.InQueue("q"))
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = j.ID
		}
		plain, err := e.client.Enqueue(context.Background(), "k", map[string]int{"n": 1}, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		a := e.lease("w-1@box", 10, "")
		if len(a.Jobs) != len(cases)+1 {
			t.Fatalf("leased %d jobs, want %d", len(a.Jobs), len(cases)+1)
		}
		var items []OutcomeItem
		for _, lj := range a.Jobs {
			it := OutcomeItem{ID: lj.ID, Lease: lj.Lease, Outcome: "complete"}
			for i, id := range ids {
				if id == lj.ID {
					it.Result = json.RawMessage(cases[i].result)
				}
			}
			items = append(items, it)
		}
		for _, o := range e.outcomes("w-1@box", items...) {
			if o.Status != 200 {
				t.Fatalf("outcome: %+v", o)
			}
		}
		read := func(id int64, query string) map[string]json.RawMessage {
			t.Helper()
			var m map[string]json.RawMessage
			e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d%s", id, query), ""), 200, &m)
			return m
		}
		for i, c := range cases {
			if got := read(ids[i], ""); !jsonSame(t, got["result"], c.masked) {
				t.Errorf("case %d: result %s, want %s", i, got["result"], c.masked)
			}
			if got := read(ids[i], "?reveal=true"); !jsonSame(t, got["result"], c.result) {
				t.Errorf("case %d, revealed: result %s, want %s", i, got["result"], c.result)
			}
		}
		if got := read(plain.ID, ""); got["result"] != nil {
			t.Errorf("completed without a result: result %s, want none", got["result"])
		}
		var list struct {
			Jobs []map[string]json.RawMessage `json:"jobs"`
		}
		e.want(e.do("GET", "/v1/jobs?queue=q", ""), 200, &list)
		if len(list.Jobs) != len(cases)+1 {
			t.Fatalf("listed %d jobs", len(list.Jobs))
		}
		for _, j := range list.Jobs {
			if j["result"] != nil {
				t.Errorf("listed job %s with a result %s", j["id"], j["result"])
			}
		}
	})
}

// TestRedactResultNotJSON: a payload's secret echoed outside a string of
// the result (a number) masks the result whole, as a JSON string, rather
// than answer JSON the mask broke.
func TestRedactResultNotJSON(t *testing.T) {
	a := newEnv(t, Options{}).api.api
	j := &redrive.Job{Kind: "k", State: store.Completed, Payload: json.RawMessage(`{"token":"918273645"}`),
		Result: json.RawMessage(`{"n":918273645}`)}
	a.redactJob(j)
	if want, _ := json.Marshal(redact.Mask); string(j.Result) != string(want) {
		t.Errorf("result %s, want %s", j.Result, want)
	}
	if strings.Contains(string(j.Payload), "918273645") {
		t.Errorf("payload %s shows its secret", j.Payload)
	}
}

// jsonSame reports whether got and want are the same JSON value.
func jsonSame(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	if got == nil {
		return false
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}
