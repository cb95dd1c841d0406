package redact

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// httpWithBody is an http payload whose body is body, with the content
// type ctype ("": none).
func httpWithBody(body, ctype string) json.RawMessage {
	h := map[string]string{"Accept": "x"}
	if ctype != "" {
		h["Content-Type"] = ctype
	}
	b, _ := json.Marshal(map[string]any{"url": "https://h.example/token", "headers": h, "body": body})
	return b
}

// bodyOf returns the body of an http payload.
func bodyOf(t *testing.T, p json.RawMessage) string {
	t.Helper()
	var v struct {
		Body string `json:"body"`
	}
	if err := json.Unmarshal(p, &v); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return v.Body
}

func TestPayloadBody(t *testing.T) {
	r := Default()
	for _, c := range []struct {
		name, ctype, body, want string
	}{
		{"json", "application/json", `{"client_secret":"s3cr3t", "grant_type":"client_credentials"}`,
			`{"client_secret":"•••", "grant_type":"client_credentials"}`},
		{"json sniffed, nested, layout kept", "", "{\n  \"auth\": {\"password\": \"hunter22\", \"user\": \"ann\"},\n  \"list\": [{\"token\": 12345}]\n}",
			"{\n  \"auth\": {\"password\": \"•••\", \"user\": \"ann\"},\n  \"list\": [{\"token\": \"•••\"}]\n}"},
		{"json object value", "application/json", `{"credentials":{"id":"abcd","pw":"efgh"},"n":1}`, `{"credentials":"•••","n":1}`},
		{"json key twice", "", `{"client_secret":"one1","client_secret":"two2"}`, `{"client_secret":"•••","client_secret":"•••"}`},
		{"json under a text type", "text/plain", `{"api_key":"k3yv4lue"}`, `{"api_key":"•••"}`},
		{"form", "application/x-www-form-urlencoded; charset=utf-8", "client_secret=s3cr3t&grant_type=client_credentials&client_id=app",
			"client_secret=•••&grant_type=client_credentials&client_id=app"},
		{"form sniffed, escaped", "", "grant_type=password&username=ann&password=p%40ss+w0rd&x=",
			"grant_type=password&username=ann&password=•••&x="},
		{"form escaped name", "", "client%5Fsecret=abcd1234", "client%5Fsecret=•••"},
		{"empty secret", "application/json", `{"token":"","secret":null}`, `{"token":"","secret":null}`},
		{"plain text", "text/plain", "the token is s3cr3t", "the token is s3cr3t"},
		{"xml", "application/xml", `<a password="x">y</a>`, `<a password="x">y</a>`},
		{"text with = not a form", "", "token = s3cr3t", "token = s3cr3t"},
		{"not json", "application/json", `{"token":`, `{"token":`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := httpWithBody(c.body, c.ctype)
			out, secrets := r.Payload("http", in)
			if got := bodyOf(t, out); got != c.want {
				t.Fatalf("body %q, want %q", got, c.want)
			}
			for _, s := range secrets {
				if strings.Contains(c.want, s) {
					t.Errorf("secret %q is shown", s)
				}
			}
			// Sent back as read, the stored body comes back byte for
			// byte.
			back, err := Restore("http", out, in)
			if err != nil {
				t.Fatal(err)
			}
			if got := bodyOf(t, back); got != c.body {
				t.Fatalf("restored body %q, want %q", got, c.body)
			}
		})
	}
	// The download kind too; other kinds have no body of this sort.
	in := httpWithBody(`{"client_secret":"s3cr3t"}`, "")
	if out, _ := r.Payload("download", in); strings.Contains(string(out), "s3cr3t") {
		t.Errorf("download: %s", out)
	}
	if out, _ := r.Payload("mine", in); !strings.Contains(string(out), "s3cr3t") {
		t.Errorf("a kind of one's own: its body field is no request body: %s", out)
	}
	// Its secrets are scrubbed from the texts.
	_, secrets := r.Payload("http", httpWithBody("client_secret=s%2F3cr3t&a=b", ""))
	if got := Scrub("echo: client_secret=s%2F3cr3t (s/3cr3t)", secrets); strings.Contains(got, "3cr3t") {
		t.Errorf("Scrub: %s", got)
	}
}

func TestRestoreBody(t *testing.T) {
	stored := httpWithBody(`{"client_secret":"s3cr3t","scope":"a","list":["x",{"token":"t0k3n"}]}`, "application/json")
	edit := func(body string) json.RawMessage { return httpWithBody(body, "application/json") }
	// An edit elsewhere in the body, reformatted: the masked values
	// keep the stored ones.
	back, err := Restore("http", edit("{\"scope\": \"b\",\n \"client_secret\": \"•••\", \"list\":[\"x\",{\"token\":\"\\u2022\\u2022\\u2022\"}]}"), stored)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bodyOf(t, back), "{\"scope\": \"b\",\n \"client_secret\": \"s3cr3t\", \"list\":[\"x\",{\"token\":\"t0k3n\"}]}"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
	// A form.
	sf := httpWithBody("client_secret=s3cr3t&grant_type=a&client_secret=two2", "")
	back, err = Restore("http", httpWithBody("grant_type=b&client_secret=%E2%80%A2%E2%80%A2%E2%80%A2&client_secret=•••", ""), sf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bodyOf(t, back), "grant_type=b&client_secret=s3cr3t&client_secret=two2"; got != want {
		t.Fatalf("form body %q, want %q", got, want)
	}
	// A mask with no stored value at its place, or within a text, is
	// refused: the mask is never sent as a secret.
	for _, body := range []string{
		`{"new_secret":"•••","client_secret":"•••"}`,
		`{"client_secret":"Bearer •••"}`,
		`{"list":["x",{"token":"•••"},{"token":"•••"}]}`,
		"client_secret=•••&extra_token=•••",
		"the secret was •••",
	} {
		if got, err := Restore("http", edit(body), stored); err == nil {
			t.Errorf("Restore(%s) took it: %s", body, got)
		} else if !strings.Contains(err.Error(), "payload.body") {
			t.Errorf("Restore(%s): %v: want the place named", body, err)
		}
	}
	// A body left as stored keeps whatever it holds.
	odd := httpWithBody("a note: •••", "text/plain")
	if got, err := Restore("http", odd, odd); err != nil || bodyOf(t, got) != "a note: •••" {
		t.Errorf("an unchanged body: %s %v", got, err)
	}
	// HasMask sees a mask escaped inside a JSON body.
	if !HasMask(edit(`{"token":"\u2022\u2022\u2022"}`)) || !HasMask(edit("token=%e2%80%a2%E2%80%A2%e2%80%a2")) {
		t.Error("HasMask missed an escaped mask in a body")
	}
	if HasMask(edit(`{"a":"\u2021"}`)) {
		t.Error("HasMask saw a mask in a body without one")
	}
}

// FuzzBody checks that a secret field of a JSON or form body never
// survives redaction, that the rest of the body is kept, and that
// Restore brings the body back.
func FuzzBody(f *testing.F) {
	f.Add("client_secret", "s3cr3t", "grant_type", "x", true)
	f.Add("password", "p@ss w", "user", "ann", false)
	f.Add("token", "\"q\"", "a", "", true)
	f.Fuzz(func(t *testing.T, name, value, other, ovalue string, asJSON bool) {
		if !utf8.ValidString(name+value+other+ovalue) || strings.Contains(name+value+other+ovalue, "•") || value == "" || len(value) < MinSecret ||
			strings.ContainsRune(name+value+other+ovalue, utf8.RuneError) || name == other {
			t.Skip()
		}
		r := Default()
		var body, ctype string
		if asJSON {
			b, _ := json.Marshal(map[string]string{name: value, other: ovalue})
			body, ctype = string(b), "application/json"
		} else {
			body = url.QueryEscape(name) + "=" + url.QueryEscape(value) + "&" + url.QueryEscape(other) + "=" + url.QueryEscape(ovalue)
			ctype = "application/x-www-form-urlencoded"
		}
		in := httpWithBody(body, ctype)
		out, _ := r.Payload("http", in)
		if !json.Valid(out) {
			t.Fatalf("not JSON: %s", out)
		}
		got := bodyOf(t, out)
		kept := mustJSON(name) + ":" + mustJSON(value)
		if !asJSON {
			kept = url.QueryEscape(name) + "=" + url.QueryEscape(value)
		}
		if r.Headers.Match(name) && strings.Contains(got, kept) {
			t.Fatalf("secret kept: %q", got)
		}
		back, err := Restore("http", out, in)
		if err != nil {
			t.Fatal(err)
		}
		if bodyOf(t, back) != body {
			t.Fatalf("restored %q, want %q", bodyOf(t, back), body)
		}
	})
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
