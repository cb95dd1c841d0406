package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestURLUserinfoMasked: the user name of a URL's user information is
// masked as its password is (a token is often the user name:
// https://<token>@host/, https://<api key>:@host/), with or without a
// password; the edit of a masked URL gets both back from the stored one.
func TestURLUserinfoMasked(t *testing.T) {
	r := Default()
	for _, tc := range []struct{ in, want string }{
		{"https://bob:hunter22@a.example/p?x=1", "https://•••:•••@a.example/p?x=1"},
		{"https://ghp_abcdef123456@github.example/o/r.git", "https://•••@github.example/o/r.git"},
		{"https://sk_live_4242424242:@api.example/v1", "https://•••:@api.example/v1"},
		{"https://user%40corp:p%2Fw0rd@a.example/", "https://•••:•••@a.example/"},
		{"https://a.example/no-userinfo", "https://a.example/no-userinfo"},
		{"https://@a.example/", "https://@a.example/"},
	} {
		got, secrets := r.URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, s := range secrets {
			if !strings.Contains(tc.in, s) && !strings.Contains(tc.in, strings.NewReplacer("@", "%40", "/", "%2F").Replace(s)) {
				t.Errorf("URL(%q): secret %q is not in the URL", tc.in, s)
			}
		}
		in := `{"url":` + jsonString(tc.in) + `,"headers":{}}`
		out, _ := r.Payload("http", json.RawMessage(in))
		if strings.Contains(string(out), "hunter22") || strings.Contains(string(out), "ghp_abcdef") || strings.Contains(string(out), "sk_live") || strings.Contains(string(out), "corp") {
			t.Errorf("Payload(%s) = %s: a user name or password left", in, out)
		}
		back, err := Restore("http", out, json.RawMessage(in))
		if err != nil || !jsonSame(back, json.RawMessage(in)) {
			t.Errorf("Restore(%s) = %s, %v, want %s", out, back, err, in)
		}
	}
	// A masked user name where the stored URL has none is refused.
	if out, err := Restore("http", json.RawMessage(`{"url":"https://•••@a.example/"}`), json.RawMessage(`{"url":"https://a.example/"}`)); err == nil {
		t.Errorf("Restore of a masked user name over none = %s, want an error", out)
	}
	// The user name is scrubbed from texts that echo it.
	_, secrets := r.URL("https://ghp_abcdef123456@github.example/")
	if msg := Scrub("fatal: could not read from https://ghp_abcdef123456@github.example/", secrets); strings.Contains(msg, "ghp_abcdef123456") {
		t.Errorf("Scrub left the user name: %s", msg)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonSame(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
