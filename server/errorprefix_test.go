package server

import (
	"net/url"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/failure"
)

// error_prefix selects by the start of the error, case-sensitively, in
// listings, counts and groups; a purge or redrive refuses it.
func TestErrorPrefixParam(t *testing.T) {
	e := newEnv(t, Options{Token: "tok"})
	e.makeDead("orders", "card declined: 4242", failure.Permanent)
	e.makeDead("orders", "card declined: 1111", failure.Permanent)
	e.makeDead("orders", "Card declined", failure.Permanent)
	e.makeDead("mail", "the card declined", failure.Transient)

	q := url.Values{"error_prefix": {"card declined"}}
	if n := e.listedOf("/v1/dlq", q); n != 2 {
		t.Errorf("GET /v1/dlq?%s listed %d jobs, want 2", q.Encode(), n)
	}
	if n := e.countOf("/v1/dlq/count?" + q.Encode()); n != 2 {
		t.Errorf("dlq/count?%s = %d, want 2", q.Encode(), n)
	}
	if n := e.countOf("/v1/jobs/count?state=dead&" + q.Encode()); n != 2 {
		t.Errorf("jobs/count?state=dead&%s = %d, want 2", q.Encode(), n)
	}
	var groups struct {
		Groups []struct {
			Count int64 `json:"count"`
		} `json:"groups"`
	}
	r := e.do("GET", "/v1/dlq/groups?"+q.Encode(), "")
	e.want(r, 200, &groups)
	var sum int64
	for _, g := range groups.Groups {
		sum += g.Count
	}
	if sum != 2 {
		t.Errorf("dlq/groups?%s counts %d jobs (%s), want 2", q.Encode(), sum, r.body)
	}
	// q still matches anywhere, in any case.
	if n := e.countOf("/v1/dlq/count?q=card+declined"); n != 4 {
		t.Errorf("dlq/count?q=card+declined = %d, want 4", n)
	}

	// Operations refuse it, with a message, and change nothing.
	if r := e.do("DELETE", "/v1/dlq?"+q.Encode(), ""); r.status != 400 {
		t.Errorf("DELETE /v1/dlq?%s: %d %s, want 400", q.Encode(), r.status, r.body)
	}
	r = e.do("POST", "/v1/dlq/redrive", `{"filter":{"error_prefix":"card declined"}}`)
	if r.status != 400 || !strings.Contains(string(r.body), "error prefix") {
		t.Errorf("redrive by error_prefix: %d %s, want 400 naming the error prefix", r.status, r.body)
	}
	if n := e.countOf("/v1/dlq/count"); n != 4 {
		t.Errorf("dead jobs after the refused operations: %d, want 4", n)
	}
	// Text no store compares is refused.
	if r := e.do("GET", "/v1/dlq?error_prefix=%00", ""); r.status != 400 {
		t.Errorf("error_prefix with a NUL: %d %s, want 400", r.status, r.body)
	}
}
