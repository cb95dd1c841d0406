package summary

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		kind, payload, want string
	}{
		{"http", `{"method":"post","url":"https://u:pw@example.com/hook?sig=abc#f","headers":{"Authorization":"Bearer x"}}`,
			"POST https://example.com/hook?***"},
		{"http", `{"url":"https://example.com/a"}`, "GET https://example.com/a"},
		{"download", `{"url":"https://example.com/big.iso"}`, "download https://example.com/big.iso"},
		{"http", `{"method":"GET"}`, `{"method":"GET"}`},
		{"email", `{"to":"a@example.com","password":"hunter2","n":1.50,"tags":["x",true,null],"shipping":{"city":"Lyon"}}`,
			`{"to":"a@example.com","password":"***","n":1.50,"tags":["x",true,null],"shipping":{"city":"Lyon"}}`},
		{"x", `{"headers":{"X-Api-Key":"k"},"api_key":"k","link":"https://h/p?token=t","<b>":"&"}`,
			`{"headers":"***","api_key":"***","link":"https://h/p?***","<b>":"&"}`},
		{"x", `[1,[2,{}],{"a":[]}]`, `[1,[2,{}],{"a":[]}]`},
		{"x", `"text"`, `"text"`},
		{"x", `null`, ""},
		{"x", ``, ""},
	} {
		if got := Of(c.kind, json.RawMessage(c.payload)); got != c.want {
			t.Errorf("Of(%s, %s) = %s, want %s", c.kind, c.payload, got, c.want)
		}
	}
}

func TestOfBounded(t *testing.T) {
	long := `{"a":"` + strings.Repeat("é", 500) + `","b":[` + strings.Repeat("1,", 500) + `1]}`
	got := Of("x", json.RawMessage(long))
	if n := utf8.RuneCountInString(got); n > Max || !strings.HasSuffix(got, "…") {
		t.Errorf("summary of %d runes %q, want at most %d ending in …", n, got, Max)
	}
	got = Of("http", json.RawMessage(`{"url":"https://example.com/`+strings.Repeat("p", 500)+`"}`))
	if n := utf8.RuneCountInString(got); n > Max {
		t.Errorf("summary of %d runes", n)
	}
}

// FuzzOf: any payload gives a bounded line without control or format
// characters that never holds a secret value the payload put under a
// secret key.
func FuzzOf(f *testing.F) {
	f.Add("http", `{"method":"POST","url":"https://example.com/x?a=1"}`)
	f.Add("x", `{"password":"SECRETVALUE","a":[1,{"token":"SECRETVALUE"}]}`)
	f.Add("x", `{"a":`)
	f.Fuzz(func(t *testing.T, kind, payload string) {
		got := Of(kind, json.RawMessage(payload))
		if utf8.RuneCountInString(got) > Max {
			t.Fatalf("summary longer than %d runes: %q", Max, got)
		}
		if strings.ContainsFunc(got, hidden) {
			t.Fatalf("summary %q holds a control or format character", got)
		}
		if json.Valid([]byte(payload)) && strings.Contains(payload, `"password":"SECRETVALUE"`) && strings.Contains(got, "SECRETVALUE") &&
			!strings.Contains(strings.ReplaceAll(payload, `"password":"SECRETVALUE"`, ""), "SECRETVALUE") {
			t.Fatalf("summary %q shows a password", got)
		}
	})
}
