package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// checkAudited checks, after the good calls of TestOpenAPIConformance,
// that a route that changes something (enqueues aside) recorded its
// successful calls in the audit log, as actor, and that any other route
// recorded nothing: so each mutating route of openapi.json is checked,
// and a new one that does not record fails.
func checkAudited(t *testing.T, e *env, o docOperation, actor string) {
	t.Helper()
	pattern := routePattern(o.method, o.path)
	entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: pattern}, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !audited(pattern) {
		if len(entries) > 0 {
			t.Errorf("%s is not a change, yet recorded %+v", o, entries[0])
		}
		return
	}
	if len(entries) == 0 {
		t.Errorf("%s succeeded and recorded nothing in the audit log", o)
		return
	}
	for _, en := range entries {
		if en.Actor != actor || en.Status >= 400 || en.At.IsZero() || en.Remote == "" || en.Target == "" {
			t.Errorf("%s recorded %+v, want actor %s, a status, a time, a remote address and a target", o, en, actor)
		}
	}
}

// TestAuditedRoutes: every route of openapi.json that is not a GET and is
// under /v1 is recorded, enqueues aside; reads are not.
func TestAuditedRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	n := 0
	for _, o := range docOperations(doc) {
		pattern := routePattern(o.method, o.path)
		want := o.method != http.MethodGet && strings.HasPrefix(o.path, "/v1/") && !notAudited[pattern]
		if audited(pattern) != want {
			t.Errorf("%s: audited %v, want %v", o, audited(pattern), want)
		}
		if want {
			n++
		}
	}
	if n < 20 {
		t.Errorf("only %d audited routes", n)
	}
}

// TestAuditEntries: a purge by a read token is refused and not recorded;
// by an admin, recorded with its name, role, filter, operation and
// address; a redrive with a payload records that the payload was edited,
// not the payload; a refused change and a read record nothing; GET
// /v1/audit pages newest first and filters by actor and action; no route
// changes an entry.
func TestAuditEntries(t *testing.T) {
	e := newEnv(t, roleOptions())
	admin := "Bearer " + roleTokens[RoleAdmin]
	wantErr(t, e.do("DELETE", "/v1/dlq?queue=mail", "", "Authorization", "Bearer "+roleTokens[RoleRead]), 403, "forbidden", "")
	if r := e.do("DELETE", "/v1/dlq?queue=mail", "", "Authorization", admin); r.status != http.StatusAccepted {
		t.Fatalf("purge: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/queues/mail/pause", "", "Authorization", "Bearer "+roleTokens[RoleOperate]); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/dlq/redrive", `{"ids":[999],"payload":{"secret":"s3cr3t"},"note":"fixed the card"}`, "Authorization", admin); r.status >= 500 {
		t.Fatalf("redrive: %d %s", r.status, r.body)
	}
	e.do("GET", "/v1/stats", "", "Authorization", admin)

	type auditList struct {
		Entries []store.AuditEntry `json:"entries"`
		Next    string             `json:"next"`
	}
	var list auditList
	e.want(e.do("GET", "/v1/audit", "", "Authorization", "Bearer "+roleTokens[RoleRead]), 200, &list)
	var actions []string
	for _, en := range list.Entries {
		actions = append(actions, en.Actor+" "+en.Action)
		if strings.Contains(en.Target, "s3cr3t") {
			t.Errorf("the payload is in the audit log: %s", en.Target)
		}
	}
	got := strings.Join(actions, "; ")
	if !strings.HasPrefix(got, "admin-user POST /v1/dlq/redrive; operate-user POST /v1/queues/{name}/pause; admin-user DELETE /v1/dlq") || len(list.Entries) != 3 {
		t.Fatalf("entries: %s", got)
	}
	redrive, pause, purge := list.Entries[0], list.Entries[1], list.Entries[2]
	if !strings.Contains(redrive.Target, `"payload_edited":true`) || redrive.Note != "fixed the card" || redrive.Role != "admin" {
		t.Errorf("redrive entry: %+v", redrive)
	}
	if !strings.Contains(pause.Target, `"name":"mail"`) || pause.Count != 1 || pause.Role != "operate" {
		t.Errorf("pause entry: %+v", pause)
	}
	if !strings.Contains(purge.Target, "queue=mail") || !strings.HasPrefix(purge.OperationID, "op_") || purge.Status != http.StatusAccepted || !strings.HasPrefix(purge.Remote, "127.0.0.1:") {
		t.Errorf("purge entry: %+v", purge)
	}
	list = auditList{}
	e.want(e.do("GET", "/v1/audit?limit=1&actor=admin-user", "", "Authorization", admin), 200, &list)
	if len(list.Entries) != 1 || list.Next == "" || list.Entries[0].ID != redrive.ID {
		t.Fatalf("page 1: %+v", list)
	}
	next := list.Next
	list = auditList{}
	e.want(e.do("GET", "/v1/audit?limit=1&actor=admin-user&before="+next, "", "Authorization", admin), 200, &list)
	if len(list.Entries) != 1 || list.Next != "" || list.Entries[0].ID != purge.ID {
		t.Fatalf("page 2: %+v", list)
	}
	list = auditList{}
	e.want(e.do("GET", "/v1/audit?action="+strings.ReplaceAll("POST /v1/queues/{name}/pause", " ", "%20"), "", "Authorization", admin), 200, &list)
	if len(list.Entries) != 1 || list.Entries[0].ID != pause.ID {
		t.Fatalf("by action: %+v", list)
	}
	wantErr(t, e.do("GET", "/v1/audit?before=x", "", "Authorization", admin), 400, "invalid", "before")
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		if r := e.do(m, "/v1/audit", "", "Authorization", admin); r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s /v1/audit: %d", m, r.status)
		}
	}
}
