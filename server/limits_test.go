package server

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
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

// TestLimitsUseAPI: a configured limit is listed before any job used it;
// with groups=N a limit lists its busiest groups; a job's JSON says which
// limit it waits on; the series of every queue carries the limits' use.
func TestLimitsUseAPI(t *testing.T) {
	e := newEnv(t, Options{})
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Queue: "crm", Key: "payload.customer", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	var list LimitList
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 || !list.Limits[0].Configured || list.Limits[0].Max != 1 || list.Limits[0].InUse != 0 ||
		list.Limits[0].Queue != "crm" || list.Limits[0].Key != "payload.customer" {
		t.Fatalf("GET /v1/limits before any job = %+v, want per-customer configured, max 1, none in use", list)
	}
	var ids []int64
	for _, c := range []string{"c1", "c1", "c2"} {
		js, err := e.client.EnqueueMany(t.Context(), []redrive.Request{{Queue: "crm", Kind: "call", Payload: map[string]string{"customer": c}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, js[0].ID)
	}
	now := time.Now()
	if got, err := e.client.Store().Fetch(t.Context(), store.FetchParams{Queue: "crm", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}); err != nil || len(got) != 2 {
		t.Fatalf("Fetch = %d jobs, %v; want 2", len(got), err)
	}
	e.want(e.do("GET", "/v1/limits?groups=5", ""), 200, &list)
	if len(list.Limits) != 1 || list.Limits[0].InUse != 2 || len(list.Limits[0].BusiestGroups) != 2 {
		t.Fatalf("GET /v1/limits?groups=5 = %+v, want 2 in use in 2 groups", list)
	}
	e.want(e.do("GET", "/v1/limits?groups=1", ""), 200, &list)
	if g := list.Limits[0].BusiestGroups; len(g) != 1 || g[0].Running != 1 {
		t.Errorf("GET /v1/limits?groups=1: groups %+v, want one with 1 running", g)
	}
	for _, bad := range []string{"0", "101", "x", "-1"} {
		wantErr(t, e.do("GET", "/v1/limits?groups="+bad, ""), 400, "invalid", "groups")
	}
	var body struct {
		Attempt int             `json:"attempt"`
		Limit   *store.JobLimit `json:"limit"`
	}
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", ids[1]), ""), 200, &body)
	if body.Limit == nil || *body.Limit != (store.JobLimit{Name: "per-customer", Key: "c1", Max: 1, Running: 1, Waiting: true}) || body.Attempt != 0 {
		t.Errorf("GET /v1/jobs/%d = attempt %d, limit %+v; want attempt 0, waiting on per-customer (c1: 1 of 1)", ids[1], body.Attempt, body.Limit)
	}
	body.Limit = nil
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", ids[2]), ""), 200, &body)
	if body.Limit == nil || body.Limit.Waiting || body.Limit.Running != 1 {
		t.Errorf("GET /v1/jobs/%d (running) limit = %+v, want 1 running, not waiting", ids[2], body.Limit)
	}
	// A snapshot records the use; the live point of the series shows it.
	if err := e.client.Store().Snapshot(t.Context(), time.Now().Truncate(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var series struct {
		Points []struct {
			Partial bool                         `json:"partial"`
			Limits  map[string]store.LimitSample `json:"limits"`
		} `json:"points"`
	}
	e.want(e.do("GET", "/v1/stats/series?since=10m", ""), 200, &series)
	if n := len(series.Points); n == 0 || series.Points[n-1].Limits["per-customer"] != (store.LimitSample{InUse: 2, Busiest: 1}) {
		t.Errorf("series points = %+v, want the last with per-customer: 2 in use, busiest 1", series.Points)
	}
}

// TestLimitsRate: PUT /v1/limits/{name} sets a rate (with a burst),
// alone or with a max, and removes it; GET lists it; a bad rate,
// interval or burst is a 400 naming the field, and nothing is stored.
func TestLimitsRate(t *testing.T) {
	e := newEnv(t, Options{})
	var set LimitBody
	e.want(e.do("PUT", "/v1/limits/pay", `{"rate":"50/s","burst":10}`), 200, &set)
	if l := set.Limit; l.Name != "pay" || l.Max != 0 || l.Rate == nil || l.Rate.N != 50 || l.Rate.Per != time.Second || l.Rate.Burst != 10 {
		t.Fatalf("PUT rate 50/s burst 10 = %+v (rate %+v)", l, l.Rate)
	}
	var list struct {
		Limits []map[string]json.RawMessage `json:"limits"`
	}
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 || string(list.Limits[0]["rate"]) != `{"n":50,"per":"1s","per_ms":1000,"burst":10,"text":"50/1s burst 10"}` ||
		string(list.Limits[0]["throttled"]) != "0" {
		t.Errorf("GET /v1/limits = %s, want the rate and throttled", list.Limits)
	}
	e.want(e.do("PUT", "/v1/limits/pay", `{"max":4,"rate":"3/1m"}`), 200, &set)
	if l := set.Limit; l.Max != 4 || l.Rate == nil || l.Rate.N != 3 || l.Rate.Per != time.Minute || l.Rate.Burst != 10 {
		t.Errorf("PUT max 4, rate 3/1m = %+v (rate %+v), want the burst (10) kept", l, l.Rate)
	}
	for _, c := range []struct{ body, field string }{
		{`{"rate":"0/s"}`, "rate"},
		{`{"rate":"-1/s"}`, "rate"},
		{`{"rate":"fast"}`, "rate"},
		{`{"rate":"5/0s"}`, "interval"},
		{`{"rate":"5/25h"}`, "interval"},
		{`{"rate":"5/week"}`, "interval"},
		{`{"rate":"5/s","burst":0}`, "burst"},
		{`{"rate":"5/s","burst":-2}`, "burst"},
		{`{"burst":3}`, "burst"},
		{`{"rate":"none","burst":3}`, "burst"},
		{`{"max":2,"rate":"0/s"}`, "rate"},
		{`{"max":0,"rate":"none"}`, "max"},
	} {
		wantErr(t, e.do("PUT", "/v1/limits/pay", c.body), 400, "invalid", c.field)
	}
	e.want(e.do("PUT", "/v1/limits/pay", `{"max":4}`), 200, &set)
	if l := set.Limit; l.Max != 4 || l.Rate == nil || l.Rate.N != 3 || l.Rate.Per != time.Minute {
		t.Errorf("after refused PUTs: %+v (rate %+v), want max 4, rate 3/1m", l, l.Rate)
	}
	var unset LimitBody
	e.want(e.do("PUT", "/v1/limits/pay", `{"rate":"none"}`), 200, &unset)
	if l := unset.Limit; l.Max != 4 || l.Rate != nil {
		t.Errorf("PUT rate none = %+v, want max 4 and no rate", l)
	}
}

// TestLimitsRateWaiting: the jobs a rate-only limit holds count as
// waiting in GET /v1/limits.
func TestLimitsRateWaiting(t *testing.T) {
	e := newEnv(t, Options{})
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "slow", Kind: "call", Rate: "1/h"}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.client.Enqueue(t.Context(), "call", map[string]string{}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if got, err := e.client.Store().Fetch(t.Context(), store.FetchParams{Queue: redrive.DefaultQueue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}); err != nil || len(got) != 1 {
		t.Fatalf("Fetch = %d jobs, %v; want 1 (the rate's burst)", len(got), err)
	}
	var list LimitList
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 || list.Limits[0].InUse != 1 || list.Limits[0].Waiting != 2 {
		t.Fatalf("GET /v1/limits = %+v, want 1 in use, 2 waiting on the rate", list)
	}
}

// TestLimitsEdits: PUT /v1/limits/{name} keeps a limit's burst when a
// rate comes without one; max 0 removes the cap of a limit that keeps a
// rate, and is refused, naming the field, for one that would keep
// neither (nor can a limit without a max lose its rate); the hold on
// Retry-After is set and listed, and is a 404 for a limit the store does
// not keep.
func TestLimitsEdits(t *testing.T) {
	e := newEnv(t, Options{})
	var set LimitBody
	e.want(e.do("PUT", "/v1/limits/pay", `{"max":3,"rate":"50/s","burst":10}`), 200, &set)
	e.want(e.do("PUT", "/v1/limits/pay", `{"rate":"20/s"}`), 200, &set)
	if l := set.Limit; l.Rate == nil || l.Rate.N != 20 || l.Rate.Burst != 10 {
		t.Errorf("PUT rate 20/s without a burst = %+v (rate %+v), want burst 10 kept", l, l.Rate)
	}
	e.want(e.do("PUT", "/v1/limits/pay", `{"max":0}`), 200, &set)
	if l := set.Limit; l.Max != 0 || l.Rate == nil || l.Rate.N != 20 {
		t.Errorf("PUT max 0 = %+v (rate %+v), want no max, rate 20/s", l, l.Rate)
	}
	// Neither max nor rate: refused, naming the field, nothing changed.
	wantErr(t, e.do("PUT", "/v1/limits/pay", `{"rate":"none"}`), 400, "invalid", "rate")
	e.want(e.do("PUT", "/v1/limits/only-max", `{"max":2}`), 200, &set)
	wantErr(t, e.do("PUT", "/v1/limits/only-max", `{"max":0}`), 400, "invalid", "max")
	wantErr(t, e.do("PUT", "/v1/limits/nosuch", `{"max":0}`), 400, "invalid", "max")
	// Max 0 with a new rate, in one request: the rate goes first.
	e.want(e.do("PUT", "/v1/limits/only-max", `{"max":0,"rate":"5/s"}`), 200, &set)
	if l := set.Limit; l.Max != 0 || l.Rate == nil || l.Rate.N != 5 || l.Rate.Burst != 1 {
		t.Errorf("PUT max 0, rate 5/s = %+v (rate %+v), want no max, 5/s burst 1", l, l.Rate)
	}
	var list LimitList
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	for _, l := range list.Limits {
		if l.Max == 0 && l.Rate == nil {
			t.Errorf("limit %s has neither max nor rate: %+v", l.Name, l)
		}
	}
	// The hold on Retry-After.
	e.want(e.do("PUT", "/v1/limits/pay", `{"hold_on_retry_after":true}`), 200, &set)
	if !set.Limit.HoldOnRetryAfter || set.Limit.Rate == nil {
		t.Errorf("PUT hold on = %+v, want the hold on, the rate kept", set.Limit)
	}
	var raw struct {
		Limits []map[string]json.RawMessage `json:"limits"`
	}
	e.want(e.do("GET", "/v1/limits", ""), 200, &raw)
	for _, l := range raw.Limits {
		if string(l["name"]) == `"pay"` && (string(l["hold_on_retry_after"]) != "true" || string(l["held_groups"]) != "0") {
			t.Errorf("GET /v1/limits: pay = %s, want hold_on_retry_after true, held_groups 0", l)
		}
	}
	e.want(e.do("PUT", "/v1/limits/pay", `{"hold_on_retry_after":false}`), 200, &set)
	if set.Limit.HoldOnRetryAfter {
		t.Errorf("PUT hold off = %+v", set.Limit)
	}
	wantErr(t, e.do("PUT", "/v1/limits/nosuch", `{"hold_on_retry_after":true}`), 404, "not_found", "")
}
