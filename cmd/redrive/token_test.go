package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestTokenNewConfiguresServe: the tokens `redrive token new` makes, put
// in serve's config file as it prints them, sign requests with their
// roles: a read token reads and is refused a purge (403 naming the role
// needed), an operate token pauses a queue; --token still works as an
// admin token beside them.
func TestTokenNewConfiguresServe(t *testing.T) {
	clearConnEnv(t)
	read := decode[tokenNew](t, mustCLI(t, "--json", "token", "new", "--role", "read", "--name", "alice"))
	op := decode[tokenNew](t, mustCLI(t, "--json", "token", "new", "--role", "operate", "--name", "bob"))
	if !strings.HasPrefix(read.Token, "rdt_") || len(read.Token) < 40 || read.Token == op.Token {
		t.Fatalf("tokens %q and %q", read.Token, op.Token)
	}
	text := mustCLI(t, "token", "new", "--role", "admin", "--name", "carol")
	for _, want := range []string{"token: rdt_", `"tokens": {"carol": {"role":"admin","sha256":"`, "REDRIVE_TOKENS=carol:admin:"} {
		wantIn(t, text, want)
	}
	cfg := writeFile(t, "serve.json", `{"tokens": {`+read.Config+`, `+op.Config+`}}`)
	base, _ := startServe(t, "--config", cfg, "--token", "legacy-admin-token-0123")
	if st, b := call(t, "GET", base+"/v1/stats", read.Token, ""); st != http.StatusOK {
		t.Errorf("read token reading: %d %s", st, b)
	}
	if st, b := call(t, "DELETE", base+"/v1/dlq?all=true", read.Token, ""); st != http.StatusForbidden || !strings.Contains(string(b), "needs the admin role") {
		t.Errorf("read token purging: %d %s", st, b)
	}
	if st, b := call(t, "POST", base+"/v1/queues/default/pause", op.Token, ""); st != http.StatusOK {
		t.Errorf("operate token pausing: %d %s", st, b)
	}
	if st, b := call(t, "POST", base+"/v1/queues/default/pause", read.Token, ""); st != http.StatusForbidden || !strings.Contains(string(b), "needs the operate role") {
		t.Errorf("read token pausing: %d %s", st, b)
	}
	if st, b := call(t, "DELETE", base+"/v1/dlq?all=true", "legacy-admin-token-0123", ""); st != http.StatusAccepted {
		t.Errorf("--token purging: %d %s", st, b)
	}
	if st, _ := call(t, "GET", base+"/v1/stats", read.Token+"x", ""); st != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", st)
	}
}

// TestTokenNewRefusesBadFlags: a role or a name serve would refuse is
// refused at once.
func TestTokenNewRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--role", "root", "--name", "x"}, {"--role", "read", "--name", "a b"}, {"--role", "read", "--name", "admin"},
		{"--role", "read"},
	} {
		if _, stderr, err := runCLI(t, append([]string{"token", "new"}, args...)...); err == nil {
			t.Errorf("token new %v: no error", args)
		} else if !strings.Contains(stderr, "--") && !strings.Contains(stderr, "required") {
			t.Errorf("token new %v: %s", args, stderr)
		}
	}
}
