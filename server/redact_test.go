package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/store"
)

// The secrets of the fixtures: none may appear in an answer without
// reveal.
const (
	secretAuth  = "Bearer SECRET-AUTH-0001"
	secretKey   = "SECRET-APIKEY-0002"
	secretPass  = "SECRET-PASS-0003"
	secretQuery = "SECRET-QUERY-0004"
	secretField = "SECRET-FIELD-0005"
)

var allSecrets = []string{"SECRET-AUTH-0001", secretKey, secretPass, secretQuery, secretField}

// secretHTTP is an http payload holding every kind of secret.
func secretHTTP() map[string]any {
	return map[string]any{"method": "POST", "url": "https://bob:" + secretPass + "@api.example.com/hook?token=" + secretQuery + "&page=2",
		"headers": map[string]string{"Authorization": secretAuth, "X-Api-Key": secretKey, "Content-Type": "application/json"}, "body": "{}"}
}

// payloadSchemas are the schemas of openapi.json that carry a payload or
// a text that may echo one: a route whose answer holds one of them must
// be in the redaction table.
var payloadSchemas = []string{"Job", "Schedule", "Group", "ExportLine"}

// payloadRoutes lists, from openapi.json, the operations whose 2xx
// answers hold one of payloadSchemas.
func payloadRoutes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var refs func(v any, acc map[string]bool)
	refs = func(v any, acc map[string]bool) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				if s, ok := e.(string); ok && k == "$ref" {
					name := s[strings.LastIndexByte(s, '/')+1:]
					if !acc[name] {
						acc[name] = true
						refs(schemas[name], acc)
					}
					continue
				}
				refs(e, acc)
			}
		case []any:
			for _, e := range t {
				refs(e, acc)
			}
		}
	}
	var out []string
	for path, ops := range doc["paths"].(map[string]any) {
		for method, op := range ops.(map[string]any) {
			m, ok := op.(map[string]any)
			if !ok || m["responses"] == nil {
				continue
			}
			acc := map[string]bool{}
			for status, r := range m["responses"].(map[string]any) {
				if strings.HasPrefix(status, "2") {
					refs(r, acc)
				}
			}
			for _, s := range payloadSchemas {
				if acc[s] {
					out = append(out, strings.ToUpper(method)+" "+path)
					break
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// redactFixture is a server with jobs, dead letters and a schedule whose
// payloads hold secrets.
type redactFixture struct {
	e                      *env
	dead, pending, delayed int64
	own                    int64
}

func newRedactFixture(t *testing.T) *redactFixture {
	t.Helper()
	opts := roleOptions()
	e := newEnv(t, opts)
	e.token = roleTokens[RoleAdmin]
	ctx := context.Background()
	f := &redactFixture{e: e}
	// A dead http job whose error echoes its secrets, as a server that
	// reflects the request's headers would.
	j, err := e.client.Enqueue(ctx, "http", secretHTTP(), redrive.InQueue("hooks"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "hooks", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	msg := "401 Unauthorized: you sent " + secretAuth + " and key " + secretKey
	if _, err := e.st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: "hooks", Attempt: 1, Lease: got[0].Lease, Worker: "w",
		Kind: store.Bury, At: now, Class: failure.Permanent, DeadReason: "http_401", Fingerprint: "f401abcd", Error: msg,
		Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "permanent", Error: msg}}}); err != nil {
		t.Fatal(err)
	}
	f.dead = j.ID
	if j, err = e.client.Enqueue(ctx, "http", secretHTTP(), redrive.InQueue("later")); err != nil {
		t.Fatal(err)
	}
	f.pending = j.ID
	if j, err = e.client.Enqueue(ctx, "http", secretHTTP(), redrive.InQueue("later"), redrive.After(time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.delayed = j.ID
	if j, err = e.client.Enqueue(ctx, "signup", map[string]any{"user": map[string]any{"name": "ann", "password": secretField}},
		redrive.InQueue("later")); err != nil {
		t.Fatal(err)
	}
	f.own = j.ID
	stop := runPeriodicWorker(t, e.client, redrive.Periodic{Name: "sync", Every: time.Hour, Kind: "http", Payload: secretHTTP()})
	t.Cleanup(stop)
	return f
}

// TestRedactedRoutes is the table of every route of openapi.json whose
// answer holds a payload (or a text that may echo one): each answers
// without any of the fixtures' secrets, showing the mask instead. A new
// route that returns a payload fails here until it is in the table (and
// redacts).
func TestRedactedRoutes(t *testing.T) {
	f := newRedactFixture(t)
	e := f.e
	enqueueBody, _ := json.Marshal(map[string]any{"kind": "http", "queue": "later", "payload": secretHTTP(), "run_at": time.Now().Add(time.Hour)})
	batchBody := `{"jobs":[` + string(enqueueBody) + `]}`
	id := func(n int64) string { return fmt.Sprint(n) }
	table := map[string]func() resp{
		"POST /v1/jobs":                     func() resp { return e.do("POST", "/v1/jobs", string(enqueueBody)) },
		"POST /v1/jobs/batch":               func() resp { return e.do("POST", "/v1/jobs/batch", batchBody) },
		"GET /v1/jobs":                      func() resp { return e.do("GET", "/v1/jobs?history=true", "") },
		"GET /v1/jobs/{id}":                 func() resp { return e.do("GET", "/v1/jobs/"+id(f.dead), "") },
		"POST /v1/jobs/{id}/priority":       func() resp { return e.do("POST", "/v1/jobs/"+id(f.delayed)+"/priority", `{"priority":5}`) },
		"POST /v1/jobs/{id}/run":            func() resp { return e.do("POST", "/v1/jobs/"+id(f.delayed)+"/run", "") },
		"POST /v1/jobs/{id}/cancel":         func() resp { return e.do("POST", "/v1/jobs/"+id(f.pending)+"/cancel", "") },
		"GET /v1/dlq":                       func() resp { return e.do("GET", "/v1/dlq?history=true", "") },
		"GET /v1/dlq/groups":                func() resp { return e.do("GET", "/v1/dlq/groups", "") },
		"GET /v1/dlq/export":                func() resp { return e.do("GET", "/v1/dlq/export", "") },
		"GET /v1/schedules":                 func() resp { return e.do("GET", "/v1/schedules", "") },
		"GET /v1/schedules/{name}":          func() resp { return e.do("GET", "/v1/schedules/sync", "") },
		"POST /v1/schedules/{name}/pause":   func() resp { return e.do("POST", "/v1/schedules/sync/pause", "") },
		"POST /v1/schedules/{name}/resume":  func() resp { return e.do("POST", "/v1/schedules/sync/resume", "") },
		"POST /v1/schedules/{name}/trigger": func() resp { return e.do("POST", "/v1/schedules/sync/trigger", "") },
	}
	routes := payloadRoutes(t)
	if len(routes) < 10 {
		t.Fatalf("openapi.json lists only %d routes with payloads: %v", len(routes), routes)
	}
	for _, route := range routes {
		do, ok := table[route]
		if !ok {
			t.Errorf("%s answers a payload (openapi.json) but is not in the redaction table: make it redact, and add it", route)
			continue
		}
		t.Run(route, func(t *testing.T) {
			r := do()
			if r.status < 200 || r.status > 299 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			for _, s := range allSecrets {
				if strings.Contains(string(r.body), s) {
					t.Errorf("the answer holds the secret %q: %s", s, r.body)
				}
			}
			if !strings.Contains(string(r.body), redact.Mask) {
				t.Errorf("the answer shows no mask: %s", r.body)
			}
		})
	}
	// The job of a user's own kind: its password field is masked, the
	// rest is shown.
	r := e.do("GET", "/v1/jobs/"+id(f.own), "")
	if strings.Contains(string(r.body), secretField) || !strings.Contains(string(r.body), `"ann"`) {
		t.Errorf("own kind's job: %s", r.body)
	}
}

// TestReveal: an admin reads the secrets with reveal=true, which the
// audit log records; other roles are refused.
func TestReveal(t *testing.T) {
	f := newRedactFixture(t)
	e := f.e
	path := fmt.Sprintf("/v1/jobs/%d?reveal=true", f.dead)
	for _, role := range []Role{RoleRead, RoleOperate} {
		e.token = roleTokens[role]
		wantErr(t, e.do("GET", path, ""), 403, "forbidden", "")
		wantErr(t, e.do("GET", "/v1/dlq?reveal=true", ""), 403, "forbidden", "")
	}
	e.token = roleTokens[RoleAdmin]
	for _, p := range []string{path, "/v1/jobs?reveal=true", "/v1/dlq?reveal=true", "/v1/dlq/export?reveal=true"} {
		r := e.do("GET", p, "")
		if r.status != 200 || !strings.Contains(string(r.body), secretKey) || !strings.Contains(string(r.body), secretPass) {
			t.Errorf("GET %s: %d %s", p, r.status, r.body)
		}
	}
	wantErr(t, e.do("GET", "/v1/jobs/1?reveal=maybe", ""), 400, "invalid", "reveal")
	var audit struct {
		Entries []store.AuditEntry `json:"entries"`
	}
	e.want(e.do("GET", "/v1/audit", ""), 200, &audit)
	var actions []string
	for _, en := range audit.Entries {
		if en.Actor == "admin-user" && strings.HasPrefix(en.Action, "GET ") {
			actions = append(actions, en.Action)
		}
	}
	slices.Sort(actions)
	want := []string{"GET /v1/dlq", "GET /v1/dlq/export", "GET /v1/jobs", "GET /v1/jobs/{id}"}
	if !slices.Equal(actions, want) {
		t.Errorf("audited reveals %q, want %q (entries %+v)", actions, want, audit.Entries)
	}
}

// TestEditKeepsMaskedSecrets: a payload read redacted, edited and sent
// back (the dashboard's editor) keeps the stored secrets where it holds
// the mask, and takes the edit elsewhere; the mask is never stored.
func TestEditKeepsMaskedSecrets(t *testing.T) {
	f := newRedactFixture(t)
	e := f.e
	var j redrive.Job
	e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", f.dead), ""), 200, &j)
	var p map[string]any
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	p["body"] = `{"edited":true}`
	p["headers"].(map[string]any)["X-Extra"] = "plain"
	body, _ := json.Marshal(map[string]any{"ids": []int64{f.dead}, "payload": p, "note": "fix body"})
	e.want(e.do("POST", "/v1/dlq/redrive?wait=true", string(body)), 200, nil)
	got, err := e.client.Get(context.Background(), f.dead)
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal(got.Payload, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Headers["Authorization"] != secretAuth || stored.Headers["X-Api-Key"] != secretKey || stored.Headers["X-Extra"] != "plain" ||
		stored.Body != `{"edited":true}` || stored.URL != secretHTTP()["url"] || strings.Contains(string(got.Payload), redact.Mask) {
		t.Fatalf("stored payload after the edit: %s", got.Payload)
	}
	// The redriven event's previous payload is shown redacted too.
	r := e.do("GET", fmt.Sprintf("/v1/jobs/%d", f.dead), "")
	for _, s := range allSecrets {
		if strings.Contains(string(r.body), s) {
			t.Errorf("the edited job's answer holds %q: %s", s, r.body)
		}
	}

	// A mask where the job has no value, or for a filter, is refused.
	bad, _ := json.Marshal(map[string]any{"ids": []int64{f.pending}, "payload": map[string]any{"url": "https://a.example/", "headers": map[string]string{"X-New-Token": redact.Mask}}})
	wantErr(t, e.do("POST", "/v1/dlq/redrive", string(bad)), 400, "invalid", "payload")
	byFilter, _ := json.Marshal(map[string]any{"filter": map[string]any{"queue": "hooks"}, "payload": p})
	wantErr(t, e.do("POST", "/v1/dlq/redrive", string(byFilter)), 400, "invalid", "payload")
}

// TestRedactJobTexts: the texts a job carries are masked with its
// payload's secrets, and a previous payload cut short (no longer JSON) is
// shown as the mask alone.
func TestRedactJobTexts(t *testing.T) {
	a := &api{redactor: redact.Default()}
	payload, _ := json.Marshal(secretHTTP())
	whole := string(payload)
	// The payload now, after an edit that replaced the secrets: the
	// older events echo the previous payload's.
	now, _ := json.Marshal(map[string]any{"url": "https://api.example.com/hook", "headers": map[string]string{"Authorization": "Bearer NEW-TOKEN-9999"}})
	j := &redrive.Job{Kind: "http", Payload: now, LastError: "401: Bearer NEW-TOKEN-9999", Summary: "POST " + secretQuery,
		History: []redrive.Event{
			{Kind: store.EventRetry, Error: "401: " + secretAuth},
			{Kind: store.EventRedriven, Note: "rotated " + secretKey, PreviousPayload: whole},
			{Kind: store.EventRedriven, PreviousPayload: whole[:len(whole)-3]},
			{Kind: store.EventDead, Error: "echo " + secretPass + " " + secretQuery},
		}}
	a.redactJob(j)
	b, _ := json.Marshal(j)
	for _, s := range append(allSecrets, "NEW-TOKEN-9999") {
		if strings.Contains(string(b), s) {
			t.Errorf("the job holds %q: %s", s, b)
		}
	}
	if j.History[2].PreviousPayload != redact.Mask {
		t.Errorf("a cut previous payload shows %q", j.History[2].PreviousPayload)
	}
	if !strings.Contains(j.History[1].PreviousPayload, `"Content-Type":"application/json"`) {
		t.Errorf("a whole previous payload lost what is not secret: %s", j.History[0].PreviousPayload)
	}
}

// TestHTTPBodySecretsMasked: the secrets inside an http job's body, a
// JSON body and a form body, are masked for a read token (the job, the
// listings, the DLQ and its export), shown to an admin with reveal=true,
// and kept by an edit that sends the mask back.
func TestHTTPBodySecretsMasked(t *testing.T) {
	e := newRedactFixture(t).e // its worker runs the redrives
	ctx := context.Background()
	const secret = "s3cr3t-BODY-0006"
	bodies := map[string]struct{ ctype, body string }{
		"json": {"application/json", `{"client_secret":"` + secret + `","grant_type":"client_credentials"}`},
		"form": {"application/x-www-form-urlencoded", "client_secret=" + secret + "&grant_type=client_credentials"},
	}
	ids := map[string]int64{}
	for name, b := range bodies {
		p := map[string]any{"method": "POST", "url": "https://auth.example.com/token",
			"headers": map[string]string{"Content-Type": b.ctype}, "body": b.body}
		j, err := e.client.Enqueue(ctx, "http", p, redrive.InQueue("tok"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "tok", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil || len(got) != 1 || got[0].ID != j.ID {
			t.Fatalf("fetch: %v %v", got, err)
		}
		msg := "400 from the server: you sent " + b.body
		if _, err := e.st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: "tok", Attempt: 1, Lease: got[0].Lease, Worker: "w",
			Kind: store.Bury, At: now, Class: failure.Permanent, DeadReason: "http_400", Fingerprint: "f400abcd", Error: msg,
			Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "permanent", Error: msg}}}); err != nil {
			t.Fatal(err)
		}
		ids[name] = j.ID
	}
	e.token = roleTokens[RoleRead]
	for name, id := range ids {
		for _, path := range []string{fmt.Sprintf("/v1/jobs/%d", id), "/v1/jobs?history=true", "/v1/dlq?history=true", "/v1/dlq/groups"} {
			r := e.do("GET", path, "")
			if r.status != 200 {
				t.Fatalf("GET %s: %d %s", path, r.status, r.body)
			}
			if strings.Contains(string(r.body), secret) {
				t.Errorf("%s: GET %s as read shows the secret: %s", name, path, r.body)
			}
		}
		var j redrive.Job
		e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", id), ""), 200, &j)
		var p struct {
			Body string `json:"body"`
		}
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.Body, "client_secret") || !strings.Contains(p.Body, redact.Mask) || !strings.Contains(p.Body, "grant_type") {
			t.Errorf("%s: the body as read: %q", name, p.Body)
		}
	}
	e.token = roleTokens[RoleAdmin]
	if r := e.do("GET", "/v1/dlq/export", ""); r.status != 200 || strings.Contains(string(r.body), secret) {
		t.Errorf("export: %d %s", r.status, r.body)
	}
	for name, id := range ids {
		r := e.do("GET", fmt.Sprintf("/v1/jobs/%d?reveal=true", id), "")
		if r.status != 200 || !strings.Contains(string(r.body), secret) {
			t.Errorf("%s: reveal: %d %s", name, r.status, r.body)
		}
	}
	// An edit of the masked body elsewhere keeps the stored secret.
	for name, id := range ids {
		var j redrive.Job
		e.want(e.do("GET", fmt.Sprintf("/v1/jobs/%d", id), ""), 200, &j)
		var p map[string]any
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		p["body"] = strings.Replace(p["body"].(string), "client_credentials", "refresh_token", 1)
		body, _ := json.Marshal(map[string]any{"ids": []int64{id}, "payload": p, "note": "grant"})
		e.want(e.do("POST", "/v1/dlq/redrive?wait=true", string(body)), 200, nil)
		got, err := e.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var stored struct {
			Body string `json:"body"`
		}
		if err := json.Unmarshal(got.Payload, &stored); err != nil {
			t.Fatal(err)
		}
		if want := strings.Replace(bodies[name].body, "client_credentials", "refresh_token", 1); stored.Body != want {
			t.Errorf("%s: stored body after the edit %q, want %q", name, stored.Body, want)
		}
	}
}
