package main

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestRefusalNamesFlag: an http job refused for its address names the
// flag that allows it, not the Go option, through serve's API and in the
// CLI's direct mode.
func TestRefusalNamesFlag(t *testing.T) {
	base, _ := startServe(t)
	code, body := call(t, "POST", base+"/v1/jobs", "", `{"kind":"http","payload":{"url":"http://169.254.169.254/latest/meta-data/"}}`)
	if code != 400 || !strings.Contains(string(body), "--http-allow-link-local") || strings.Contains(string(body), "AllowLinkLocal") {
		t.Errorf("link-local refusal: %d %s; want 400 naming --http-allow-link-local", code, body)
	}
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	_, _, err := runCLI(t, "--db", db, "enqueue", "http", "--payload", `{"url":"http://169.254.169.254/"}`)
	if err == nil || !strings.Contains(err.Error(), "--http-allow-link-local") {
		t.Errorf("CLI direct mode: %v; want a refusal naming --http-allow-link-local", err)
	}
}
