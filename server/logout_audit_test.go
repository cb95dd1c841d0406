package server

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// TestLogoutAudited: signing out ends every session of every token, an
// admin's included, whoever signs out (a read token may): the audit log
// records who did it and from where; a sign-out without a session (it
// ends nothing) records nothing.
func TestLogoutAudited(t *testing.T) {
	e := newEnv(t, roleOptions())
	reader := sessionCookie + "=" + sessionOf(t, e.login(roleTokens[RoleRead])).Value
	admin := sessionCookie + "=" + sessionOf(t, e.login(roleTokens[RoleAdmin])).Value
	e.want(e.do("GET", "/v1/stats", "", "Cookie", admin), 200, nil)
	for _, c := range []string{"", reader} {
		res, err := noRedirect(e).Do(mustRequest(t, "POST", e.srv.URL+"/ui/logout", "Cookie", c))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	wantErr(t, e.do("GET", "/v1/stats", "", "Cookie", admin), 401, "unauthorized", "")
	var list struct {
		Entries []store.AuditEntry `json:"entries"`
	}
	e.want(e.do("GET", "/v1/audit", "", "Authorization", "Bearer "+roleTokens[RoleAdmin]), 200, &list)
	if len(list.Entries) != 1 {
		t.Fatalf("%d audit entries, want 1 (the sign-out that ended the sessions): %+v", len(list.Entries), list.Entries)
	}
	en := list.Entries[0]
	if en.Actor != "read-user" || en.Role != "read" || en.Action != "POST /ui/logout" || !strings.HasPrefix(en.Remote, "127.0.0.1:") || en.Status != 303 {
		t.Errorf("sign-out entry: %+v", en)
	}
}
