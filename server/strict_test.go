package server

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestStrictBody: a body means one thing only. Duplicate keys (at any
// depth, a payload's included), keys in another case and lone surrogates
// are refused with a 400 naming the key, and nothing is stored.
func TestStrictBody(t *testing.T) {
	e := newEnv(t, Options{})
	for _, c := range []struct {
		name, path, body, code, field string
	}{
		{"duplicate kind", "/v1/jobs", `{"kind":"http","kind":"evil.kind"}`, "duplicate_key", "kind"},
		{"upper-case key", "/v1/jobs", `{"KIND":"http"}`, "unknown_field", "KIND"},
		{"case variant after the key", "/v1/jobs", `{"kind":"http","Kind":"x"}`, "unknown_field", "Kind"},
		{"duplicate in payload", "/v1/jobs", `{"kind":"k","payload":{"a":{"to":"x","to":"y"}}}`, "duplicate_key", "payload.a.to"},
		{"duplicate in a batch", "/v1/jobs/batch", `{"jobs":[{"kind":"k"},{"kind":"k","queue":"a","queue":"b"}]}`, "duplicate_key", "jobs[1].queue"},
		{"case in a batch", "/v1/jobs/batch", `{"jobs":[{"Kind":"k"}]}`, "unknown_field", "jobs[0].Kind"},
		{"lone surrogate", "/v1/jobs", `{"kind":"http\ud800"}`, "malformed_json", "kind"},
		{"lone surrogate in payload", "/v1/jobs", `{"kind":"k","payload":{"s":"a\udc00"}}`, "malformed_json", "payload.s"},
		{"duplicate in a filter", "/v1/dlq/redrive", `{"filter":{"queue":"a","queue":"b"}}`, "duplicate_key", "filter.queue"},
		{"case in a filter", "/v1/dlq/redrive", `{"filter":{"Queue":"a"}}`, "unknown_field", "filter.Queue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, e.do("POST", c.path, c.body), 400, c.code, c.field)
		})
	}
	if n := jobsOf(t, e.client, ""); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
	// A pair of surrogates is a character, and keys differing in case
	// are distinct in a payload.
	r := e.do("POST", "/v1/jobs", `{"kind":"k","payload":{"s":"\ud83d\ude00","a":1,"A":2}}`)
	if r.status != 201 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
}

// TestContentEncoding: a compressed body is refused with 415, whether
// or not it really is compressed, and nothing is stored.
func TestContentEncoding(t *testing.T) {
	e := newEnv(t, Options{})
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(`{"kind":"k"}`))
	_ = w.Close()
	wantErr(t, e.do("POST", "/v1/jobs", gz.String(), "Content-Encoding", "gzip"), 415, "unsupported_media_type", "")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Encoding", "gzip"), 415, "unsupported_media_type", "")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Encoding", "identity, br"), 415, "unsupported_media_type", "")
	if n := jobsOf(t, e.client, ""); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
	if r := e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Encoding", "identity"); r.status != 201 {
		t.Fatalf("identity: status %d: %s", r.status, r.body)
	}
}

// TestNegativeCursor: a cursor that EncodeCursor never writes, such as
// -1 (LTE), is a 400, not an empty page.
func TestNegativeCursor(t *testing.T) {
	e := newEnv(t, Options{})
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, path := range []string{"/v1/jobs?cursor=" + enc("-1"), "/v1/jobs?cursor=LTE", "/v1/dlq?cursor=" + enc("-1.-1"),
		"/v1/dlq?cursor=" + enc("5.-1"), "/v1/jobs?cursor=" + enc("+3")} {
		wantErr(t, e.do("GET", path, ""), 400, "invalid", "cursor")
	}
}

// TestNameRule: one name rule on every route that names something new,
// path parameters included (after unescaping): nothing invisible, nothing
// path-like.
func TestNameRule(t *testing.T) {
	e := newEnv(t, Options{})
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/jobs", `{"kind":"\u200d"}`, "kind"},
		{"POST", "/v1/jobs", `{"kind":"k","queue":".."}`, "queue"},
		{"POST", "/v1/jobs", `{"kind":"k","dependency":"a\u200bb"}`, "dependency"},
		{"POST", "/v1/jobs/batch", `{"jobs":[{"kind":"k","queue":"\ufeffq"}]}`, "jobs[0].queue"},
		{"POST", "/v1/queues/%2E%2E/pause", "", "name"},
		{"POST", "/v1/queues/%E2%80%8D/pause", "", "name"},
		{"POST", "/v1/breakers/a%2F..%2Fb/open", "", "name"},
		{"POST", "/v1/breakers/%2E%2E/open", "", "name"},
		{"POST", "/v1/breakers/x%E2%80%8D/open", "", "name"},
		{"POST", "/v1/schedules/%2E%2E/pause", "", "name"},
		{"GET", "/v1/schedules/%E2%80%8D", "", "name"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			wantErr(t, e.do(c.method, c.path, c.body), 400, "invalid", c.field)
		})
	}
	if n := jobsOf(t, e.client, ""); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
	qs, err := e.client.Queues(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == ".." || q.Name == "\u200d" {
			t.Errorf("queue %q created", q.Name)
		}
	}
	// No queue ".." is known: resuming it would record one.
	wantErr(t, e.do("POST", "/v1/queues/%2E%2E/resume", ""), 400, "invalid", "name")
}

// TestRedrivePayloadValidated: a redrive's edited payload goes through
// the validator of the selected jobs' kind first, by ids or by filter:
// a 400 naming the field, and nothing changes.
func TestRedrivePayloadValidated(t *testing.T) {
	e := newEnv(t, Options{})
	e.client.SetValidator("dead-kind", func(p json.RawMessage) error {
		var v map[string]any
		if err := json.Unmarshal(p, &v); err != nil {
			return err
		}
		for k := range v {
			if k != "msg" {
				return &redrive.FieldError{Field: "payload." + k, Err: errors.New("unknown field")}
			}
		}
		return nil
	})
	id := e.makeDead("mail", "boom", failure.Permanent)
	for _, body := range []string{
		fmt.Sprintf(`{"ids":[%d],"payload":{"nope":1}}`, id),
		`{"filter":{"queue":"mail"},"payload":{"nope":1}}`,
		`{"all":true,"payload":{"nope":1}}`,
		`{"filter":{"kind":"dead-kind"},"payload":{"nope":1}}`,
	} {
		wantErr(t, e.do("POST", "/v1/dlq/redrive", body), 400, "invalid", "payload.nope")
	}
	j, err := e.client.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != redrive.Dead || string(j.Payload) != `{"msg":"boom"}` {
		t.Errorf("job changed: %s %s", j.State, j.Payload)
	}
	if ops, _, err := e.client.Operations(t.Context(), "", 10); err != nil || len(ops) != 0 {
		t.Errorf("operations started: %v %v", ops, err)
	}
	// A filter that selects no job of the kind does not check it; a
	// payload the kind accepts is redriven.
	if r := e.do("POST", "/v1/dlq/redrive", `{"filter":{"queue":"other"},"payload":{"nope":1}}`); r.status != 202 {
		t.Errorf("no job of the kind: status %d: %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d],"payload":{"msg":"fixed"}}`, id)); r.status != 202 {
		t.Errorf("valid payload: status %d: %s", r.status, r.body)
	}
}

// TestResumeOldName: a queue paused before the name rule, under a name
// the rule now refuses (".." was created by POST /v1/queues/%2E%2E/pause,
// "\u200d" by a body), can still be resumed: resuming creates nothing.
// Pausing such a name is refused.
func TestResumeOldName(t *testing.T) {
	e := newEnv(t, Options{})
	for _, name := range []string{"..", "\u200d"} {
		if _, err := e.st.SetPaused(t.Context(), name, true, time.Now()); err != nil {
			t.Fatal(err)
		}
		p := "/v1/queues/" + url.PathEscape(name)
		if name == ".." {
			p = "/v1/queues/%2E%2E"
		}
		wantErr(t, e.do("POST", p+"/pause", ""), 400, "invalid", "name")
		if r := e.do("POST", p+"/resume", ""); r.status != 200 {
			t.Fatalf("resume %q: status %d: %s", name, r.status, r.body)
		}
		qs, err := e.st.Queues(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == name && q.Paused {
				t.Errorf("%q still paused", name)
			}
		}
	}
}

// TestScheduleOldName: a schedule stored before the name rule, under a
// name the rule now refuses, can still be read, paused and deleted:
// nothing but serve's declaration creates a schedule, and serve no longer
// declares such a name, so without this it could never be removed.
func TestScheduleOldName(t *testing.T) {
	e := newEnv(t, Options{})
	name := "\u200d"
	now := time.Now()
	if _, err := e.st.DeclareSchedule(t.Context(), store.ScheduleDecl{Name: name,
		Spec: json.RawMessage(`{"every":"1h","kind":"k"}`), Cursor: now}, now); err != nil {
		t.Fatal(err)
	}
	p := "/v1/schedules/" + url.PathEscape(name)
	if r := e.do("POST", p+"/pause", ""); r.status != 200 {
		t.Fatalf("pause: status %d: %s", r.status, r.body)
	}
	if r := e.do("DELETE", p, ""); r.status != 204 {
		t.Fatalf("delete: status %d: %s", r.status, r.body)
	}
	// Gone, the name is held to the rule again.
	wantErr(t, e.do("DELETE", p, ""), 400, "invalid", "name")
}

// TestUnknownQueryEverywhere: every route under /v1 refuses a query
// parameter it does not take with a 400 naming it, so that a typo cannot
// go unnoticed (GET /v1/stats, /v1/breakers and /v1/openapi.json took
// any).
func TestUnknownQueryEverywhere(t *testing.T) {
	e := newEnv(t, Options{})
	if _, err := e.client.Enqueue(t.Context(), "k", nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range routes {
		method, path, _ := strings.Cut(p, " ")
		if !isV1(path) {
			continue
		}
		path = strings.NewReplacer("{id}", "1", "{name}", "default").Replace(path)
		body := ""
		if method == "POST" || method == "PUT" {
			body = "{}"
		}
		t.Run(p, func(t *testing.T) {
			wantErr(t, e.do(method, path+"?nope=1", body), 400, "invalid", "nope")
		})
	}
}
