package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// roleTokens are a token of each role, named for it.
var roleTokens = map[Role]string{
	RoleRead:    "read-token-0123456789",
	RoleWorker:  "worker-token-0123456789",
	RoleOperate: "operate-token-0123456789",
	RoleAdmin:   "admin-token-0123456789",
}

// roleOptions are Options with a token of each role.
func roleOptions() Options {
	var o Options
	for r, tok := range roleTokens {
		o.Tokens = append(o.Tokens, Token{Name: r.String() + "-user", Role: r, SHA256: sha256.Sum256([]byte(tok))})
	}
	return o
}

// routePattern is the registered pattern of a documented path.
func routePattern(method, path string) string {
	switch path {
	case "/":
		path = "/{$}"
	case "/ui/{asset}":
		path = "/ui/"
	}
	return method + " " + path
}

var pathParamRE = regexp.MustCompile(`\{[^}]+\}`)

// TestRouteRoles is the table of every route of openapi.json against every
// role: each route has a role rule in routeRoles, the document says the
// same (x-redrive-role), and a token of each role below it is answered 403
// forbidden naming the role needed, while one at or above it is let
// through to the handler (whatever the handler then makes of the empty
// request). A route added without a rule fails here.
func TestRouteRoles(t *testing.T) {
	doc := loadOpenAPI(t)
	e := newEnv(t, roleOptions())
	for _, o := range docOperations(doc) {
		pattern := routePattern(o.method, o.path)
		need, ok := routeRoles[pattern]
		if !ok {
			t.Errorf("%s: no role rule in routeRoles", o)
			continue
		}
		documented, _ := o.op.Extensions["x-redrive-role"].(string)
		if want := need.String(); need != RoleNone && documented != want {
			t.Errorf("%s: openapi.json says x-redrive-role %q, the server needs %q", o, documented, want)
		}
		if need == RoleNone {
			if documented != "none" {
				t.Errorf("%s: openapi.json says x-redrive-role %q, the route needs no token", o, documented)
			}
			continue
		}
		path := pathParamRE.ReplaceAllString(o.path, "1")
		for _, role := range []Role{RoleRead, RoleWorker, RoleOperate, RoleAdmin} {
			t.Run(fmt.Sprintf("%s %s as %s", o.method, o.path, role), func(t *testing.T) {
				r := e.do(o.method, path, "", "Authorization", "Bearer "+roleTokens[role])
				var eb errorBody
				_ = json.Unmarshal(r.body, &eb)
				refused := r.status == http.StatusForbidden && eb.Error.Code == "forbidden"
				if !role.Allows(need) {
					if !refused {
						t.Fatalf("the %s role got %d %s, want 403 forbidden", role, r.status, r.body)
					}
					if !strings.Contains(eb.Error.Message, "needs the "+need.String()) {
						t.Errorf("the refusal does not name the role needed (%s): %s", need, eb.Error.Message)
					}
					return
				}
				if refused || r.status == http.StatusUnauthorized {
					t.Fatalf("the %s role was refused: %d %s", role, r.status, r.body)
				}
			})
		}
	}
	// Every rule is of a registered route.
	registered := map[string]bool{}
	for _, p := range append(append([]string{}, routes...), dashboardRoutes...) {
		registered[p] = true
	}
	for p := range routeRoles {
		if !registered[p] {
			t.Errorf("routeRoles has %s, which the server does not register", p)
		}
	}
}

// TestRoleEditPayloadNeedsAdmin: a redrive is the operate role's, but a
// redrive that replaces the payload is an edit, the admin's.
func TestRoleEditPayloadNeedsAdmin(t *testing.T) {
	e := newEnv(t, roleOptions())
	body := `{"ids":[1],"payload":{"x":1}}`
	r := e.do("POST", "/v1/dlq/redrive", body, "Authorization", "Bearer "+roleTokens[RoleOperate])
	wantErr(t, r, http.StatusForbidden, "forbidden", "")
	if !strings.Contains(string(r.body), "needs the admin role") {
		t.Errorf("refusal: %s", r.body)
	}
	r = e.do("POST", "/v1/dlq/redrive", body, "Authorization", "Bearer "+roleTokens[RoleAdmin])
	if r.status == http.StatusForbidden {
		t.Errorf("admin refused: %s", r.body)
	}
}

// TestRoleSession: a dashboard session carries its token's name and role:
// the page shows them and marks the body with the role, and a request
// crafted with a read session's cookie (and the header a change needs) is
// refused. The legacy single token is an admin named admin.
func TestRoleSession(t *testing.T) {
	opts := roleOptions()
	opts.Token = "legacy-token-0123456789"
	e := newEnv(t, opts)
	e.token = ""
	read := sessionOf(t, e.login(roleTokens[RoleRead]))
	cookie := sessionCookie + "=" + read.Value
	page := e.do("GET", "/", "", "Cookie", cookie)
	if !strings.Contains(string(page.body), `<body data-role="read">`) || !strings.Contains(string(page.body), "read-user · read") {
		t.Fatalf("the page of a read session: %s", page.body)
	}
	r := e.do("DELETE", "/v1/dlq?all=true", "", "Cookie", cookie, csrfHeader, "1")
	wantErr(t, r, http.StatusForbidden, "forbidden", "")
	if r := e.do("GET", "/v1/stats", "", "Cookie", cookie); r.status != http.StatusOK {
		t.Errorf("a read session reading: %d %s", r.status, r.body)
	}
	legacy := sessionOf(t, e.login(opts.Token))
	page = e.do("GET", "/", "", "Cookie", sessionCookie+"="+legacy.Value)
	if !strings.Contains(string(page.body), `<body data-role="admin">`) || !strings.Contains(string(page.body), "admin · admin") {
		t.Fatalf("the page of the legacy token's session: %s", page.body)
	}
	if r := e.do("DELETE", "/v1/dlq?all=true", "", "Authorization", "Bearer "+opts.Token); r.status == http.StatusForbidden {
		t.Errorf("the legacy token refused: %s", r.body)
	}
}

// TestRoleCancelDeadNeedsAdmin: canceling a job is the operate role's,
// but canceling a dead job takes it out of the DLQ unrun, as a purge
// does: the admin's. The table: each role against a dead and a pending
// job.
func TestRoleCancelDeadNeedsAdmin(t *testing.T) {
	e := newEnv(t, roleOptions())
	ctx := context.Background()
	dead := func() int64 {
		jobs, err := e.st.AddDead(ctx, []store.DeadJob{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`), Attempt: 1,
			DeadAt: time.Now(), LastErrorClass: failure.Permanent}}, time.Now())
		if err != nil || len(jobs) != 1 {
			t.Fatalf("AddDead: %v %v", jobs, err)
		}
		return jobs[0].ID
	}
	pending := func() int64 {
		j, err := e.client.Enqueue(ctx, "k", map[string]any{}, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	for _, c := range []struct {
		role  Role
		state string
		job   func() int64
		want  int
	}{
		{RoleRead, "pending", pending, http.StatusForbidden},
		{RoleRead, "dead", dead, http.StatusForbidden},
		{RoleOperate, "pending", pending, http.StatusOK},
		{RoleOperate, "dead", dead, http.StatusForbidden},
		{RoleAdmin, "pending", pending, http.StatusOK},
		{RoleAdmin, "dead", dead, http.StatusOK},
	} {
		id := c.job()
		r := e.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", id), "", "Authorization", "Bearer "+roleTokens[c.role])
		if r.status != c.want {
			t.Errorf("%s cancels a %s job: %d %s, want %d", c.role, c.state, r.status, r.body, c.want)
			continue
		}
		j, err := e.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == http.StatusForbidden {
			if j.State == redrive.Canceled {
				t.Errorf("%s: refused, yet job %d is canceled", c.role, id)
			}
			if c.role == RoleOperate && !strings.Contains(string(r.body), "needs the admin role") {
				t.Errorf("operate's refusal: %s", r.body)
			}
		} else if j.State != redrive.Canceled {
			t.Errorf("%s canceled a %s job: it is %s", c.role, c.state, j.State)
		}
	}
}
