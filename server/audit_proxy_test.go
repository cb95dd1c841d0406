package server

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// TestAuditRemoteBehindProxy: behind a trusted reverse proxy, an audit
// entry says where the change came from, the client the proxy forwarded
// for, and which proxy it came through, for the changes and the reads
// of secrets alike; without trusted proxies, X-Forwarded-For is not
// believed (a client could write any address in it).
func TestAuditRemoteBehindProxy(t *testing.T) {
	entries := func(e *env) []store.AuditEntry {
		t.Helper()
		var list struct {
			Entries []store.AuditEntry `json:"entries"`
		}
		e.want(e.do("GET", "/v1/audit", "", "Authorization", "Bearer "+roleTokens[RoleRead]), 200, &list)
		return list.Entries
	}
	const client = "203.0.113.7"
	opts := roleOptions()
	opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	e := newEnv(t, opts)
	if r := e.do("POST", "/v1/queues/mail/pause", "", "Authorization", "Bearer "+roleTokens[RoleOperate], "X-Forwarded-For", client); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/jobs?reveal=true", "", "Authorization", "Bearer "+roleTokens[RoleAdmin], "X-Forwarded-For", "198.51.100.1, "+client); r.status != http.StatusOK {
		t.Fatalf("reveal: %d %s", r.status, r.body)
	}
	got := entries(e)
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2: %+v", len(got), got)
	}
	for _, en := range got {
		if !strings.HasPrefix(en.Remote, client+" ") || !strings.Contains(en.Remote, "via 127.0.0.1:") {
			t.Errorf("%s: remote %q, want the client %s, via the proxy 127.0.0.1", en.Action, en.Remote, client)
		}
	}

	// No trusted proxy: the header is the client's word, not believed.
	e = newEnv(t, roleOptions())
	if r := e.do("POST", "/v1/queues/mail/pause", "", "Authorization", "Bearer "+roleTokens[RoleOperate], "X-Forwarded-For", client); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if got := entries(e); len(got) != 1 || !strings.HasPrefix(got[0].Remote, "127.0.0.1:") || strings.Contains(got[0].Remote, client) {
		t.Errorf("without trusted proxies: %+v, want the peer's address alone", got)
	}
}
