package server

import (
	"encoding/json"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestLimits: GET /v1/limits lists the limits with their use; PUT
// /v1/limits/{name} sets one's max; bad input is a 400 naming the field,
// and nothing is stored.
func TestLimits(t *testing.T) {
	e := newEnv(t, Options{})
	var list LimitList
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if list.Limits == nil || len(list.Limits) != 0 {
		t.Fatalf("GET /v1/limits on a fresh store = %+v, want an empty list", list)
	}
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "crm", Key: "payload.customer", Max: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(t.Context(), "crm", map[string]string{"customer": "c1"}); err != nil {
		t.Fatal(err)
	}
	// An enqueue whose key field is missing is a 400 naming the field.
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"crm","payload":{"other":1}}`), 400, "invalid", "payload.customer")
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 || list.Limits[0].Name != "per-customer" || list.Limits[0].Max != 5 || list.Limits[0].Waiting != 1 {
		t.Fatalf("GET /v1/limits = %+v, want per-customer, max 5, 1 waiting", list)
	}
	var body map[string]json.RawMessage
	e.want(e.do("PUT", "/v1/limits/per-customer", `{"max":2}`), 200, &body)
	var set LimitBody
	e.want(e.do("PUT", "/v1/limits/per-customer", `{"max":2}`), 200, &set)
	if set.Limit.Name != "per-customer" || set.Limit.Max != 2 {
		t.Errorf("PUT max 2 = %+v", set)
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/limits/per-customer", `{"max":0}`, "max"},
		{"/v1/limits/per-customer", `{"max":-3}`, "max"},
		{"/v1/limits/per-customer", `{"max":1000001}`, "max"},
		{"/v1/limits/per-customer", `{}`, "max"},
		{"/v1/limits/a%2Fb", `{"max":2}`, "name"},
	} {
		wantErr(t, e.do("PUT", c.path, c.body), 400, "invalid", c.field)
	}
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 || list.Limits[0].Max != 2 {
		t.Errorf("after refused PUTs: %+v, want one limit, max 2", list)
	}
}
