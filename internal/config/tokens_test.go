package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/server"
)

func TestParseTokens(t *testing.T) {
	h := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	ts, err := ParseTokens(`{"bob": {"role": "operate", "sha256": "` + h("b") + `"}, "alice": {"role": "read", "sha256": "` + h("a") + `"}}`)
	if err != nil || len(ts) != 2 || ts[0].Name != "alice" || ts[0].Role != server.RoleRead || ts[1].Role != server.RoleOperate ||
		ts[0].SHA256 != sha256.Sum256([]byte("a")) {
		t.Fatalf("object: %+v, %v", ts, err)
	}
	ts, err = ParseTokens("alice:read:" + h("a") + ", carol:admin:" + h("c"))
	if err != nil || len(ts) != 2 || ts[1].Name != "carol" || ts[1].Role != server.RoleAdmin {
		t.Fatalf("list: %+v, %v", ts, err)
	}
	if ts, err := ParseTokens(""); err != nil || ts != nil {
		t.Fatalf("empty: %+v, %v", ts, err)
	}
	for v, want := range map[string]string{
		"alice:root:" + h("a"):                             "want read, worker, operate or admin",
		"alice:read:abc":                                   "64 hex digits",
		"alice:read":                                       "want name:role:sha256",
		"a b:read:" + h("a"):                               "token name",
		"admin:read:" + h("a"):                             "--token",
		"x:read:" + h("a") + ",x:admin:" + h("b"):          "given twice",
		"x:read:" + h("a") + ",y:admin:" + h("a"):          "same sha256",
		`{"x": {"role": "read", "sha": "` + h("a") + `"}}`: "sha",
		`{"x": {"role": "read", "sha256": 5}}`:             "token \"x\"",
		`{"x": 1`:                                          "",
	} {
		if _, err := ParseTokens(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", v, err, want)
		}
	}
}

// TestTokensSetting: the file's "tokens" object, $REDRIVE_TOKENS and
// --tokens all set the tokens, with errors naming the setting.
func TestTokensSetting(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	c, err := loadConfig(t, map[string]string{"REDRIVE_TOKENS": "alice:read:" + hex.EncodeToString(sum[:])})
	if err != nil || len(c.Tokens) != 1 || c.Tokens[0].Name != "alice" {
		t.Fatalf("env: %+v, %v", c, err)
	}
	if _, err := loadConfig(t, map[string]string{"REDRIVE_TOKENS": "alice:reader:" + hex.EncodeToString(sum[:])}); err == nil || !strings.Contains(err.Error(), "REDRIVE_TOKENS") {
		t.Fatalf("bad env: %v", err)
	}
}

// FuzzParseTokens: any value gives tokens or an error, never a panic;
// tokens given have valid names and roles, distinct names and hashes.
func FuzzParseTokens(f *testing.F) {
	sum := sha256.Sum256([]byte("x"))
	h := hex.EncodeToString(sum[:])
	for _, s := range []string{"", "a:read:" + h, `{"a": {"role": "admin", "sha256": "` + h + `"}}`, "a:read", "{", ",,", "a:read:" + h + ",b:read:" + h} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ts, err := ParseTokens(v)
		if err != nil {
			return
		}
		names := map[string]bool{}
		hashes := map[[32]byte]bool{}
		for _, tok := range ts {
			if server.CheckTokenName(tok.Name) != nil || tok.Role < server.RoleRead || tok.Role > server.RoleAdmin || names[tok.Name] || hashes[tok.SHA256] {
				t.Fatalf("%q gave %+v", v, ts)
			}
			names[tok.Name], hashes[tok.SHA256] = true, true
		}
	})
}
