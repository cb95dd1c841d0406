package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// badHTTPPayloads are http jobs an attempt would refuse, and the field
// the refusal names.
var badHTTPPayloads = []struct {
	payload, field string
}{
	{`{"url":"ftp://x"}`, "payload.url"},
	{`{"url":"http://169.254.169.254/latest/meta-data/"}`, "payload.url"},
	{`{"url":"http://[::169.254.169.254]/"}`, "payload.url"},
	{`{"method":"POST"}`, "payload.url"},
	{`"https://example.com"`, "payload"},
	{`{"url":"https://example.com","colour":"red"}`, "payload"},
	{`{"url":"https://example.com","method":"GET /"}`, "payload.method"},
	{`{"url":"https://example.com","timeout":"1000h"}`, "payload.timeout"},
	{`{"url":"https://example.com","headers":{"bad header":"x"}}`, "payload.headers"},
}

// TestHTTPPayloadCheckedAtEnqueue: serve refuses a bad http payload at
// enqueue with 400 naming the field, in a single enqueue and in a batch,
// and stores nothing; the CLI's direct mode refuses it too.
func TestHTTPPayloadCheckedAtEnqueue(t *testing.T) {
	base, _ := startServe(t)
	for _, c := range badHTTPPayloads {
		code, body := call(t, "POST", base+"/v1/jobs", "", `{"kind":"http","payload":`+c.payload+`}`)
		var e struct {
			Error struct{ Code, Field string }
		}
		json.Unmarshal(body, &e)
		if code != 400 || e.Error.Code != "invalid" || e.Error.Field != c.field {
			t.Errorf("%s: %d %s; want 400 invalid on %s", c.payload, code, body, c.field)
		}
	}
	code, body := call(t, "POST", base+"/v1/jobs/batch", "", `{"jobs":[{"kind":"http","payload":{"url":"https://example.com"}},{"kind":"http","payload":{"url":"ftp://x"}}]}`)
	if code != 400 || !strings.Contains(string(body), `"field":"jobs[1].payload.url"`) {
		t.Errorf("batch: %d %s; want 400 on jobs[1].payload.url", code, body)
	}
	code, body = call(t, "GET", base+"/v1/jobs/count", "", "")
	if code != 200 || !strings.Contains(string(body), `"count":0`) {
		t.Errorf("jobs stored after refusals: %s", body)
	}

	clearConnEnv(t)
	db := sqlitetest.Path(t)
	_, _, err := runCLI(t, "--db", db, "enqueue", "http", "--payload", `{"url":"ftp://x"}`)
	if err == nil || !strings.Contains(err.Error(), "payload.url") {
		t.Errorf("CLI direct mode: %v; want a refusal naming payload.url", err)
	}
}

// FuzzHTTPPayload: the check never panics, and a payload it accepts is one
// an attempt can make a request of (the same code decides both).
func FuzzHTTPPayload(f *testing.F) {
	for _, c := range badHTTPPayloads {
		f.Add(c.payload)
	}
	f.Add(`{"url":"https://example.com/hook","method":"post","headers":{"X-A":"b"},"body":"hi","timeout":5}`)
	f.Fuzz(func(t *testing.T, payload string) {
		if !json.Valid([]byte(payload)) {
			return
		}
		err := httpValidator(json.RawMessage(payload))
		if err == nil {
			var p map[string]any
			if json.Unmarshal([]byte(payload), &p) != nil {
				t.Fatalf("accepted %q, which is not a JSON object", payload)
			}
			u, _ := p["url"].(string)
			if !strings.HasPrefix(strings.ToLower(u), "http://") && !strings.HasPrefix(strings.ToLower(u), "https://") {
				t.Fatalf("accepted %q without an http(s) URL", payload)
			}
		}
	})
}
