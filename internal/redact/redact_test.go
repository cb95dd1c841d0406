package redact

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatch(t *testing.T) {
	m := MustNew(DefaultHeaders)
	for name, want := range map[string]bool{
		"Authorization": true, "authorization": true, "AUTHORIZATION": true, "Proxy-Authorization": true,
		"Cookie": true, "Set-Cookie": true, "X-Api-Key": true, "X-Auth-Token": true, "token": true,
		"Client-Secret": true, "keyring": true, "Content-Type": false, "Accept": false, "User-Agent": false,
		"X-Cookies": false, "Authorizations": false, "": false,
	} {
		if got := m.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
	var nilM *Matcher
	if nilM.Match("Authorization") {
		t.Error("a nil Matcher matched")
	}
	none, err := Parse("none")
	if err != nil || none.Match("Authorization") {
		t.Errorf("Parse(none) = %v, %v: want a Matcher that matches nothing", none, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"", "a,,b", "*", "**", "a\x00b", strings.Repeat("a", MaxPatternLen+1),
		strings.Repeat("a,", MaxPatterns) + "a"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%.60q) took it", s)
		}
	}
	m, err := Parse(" X-Mine , *pin* ")
	if err != nil || !m.Match("x-mine") || !m.Match("USERPIN") || m.Match("authorization") {
		t.Fatalf("Parse: %v, %v", m.Patterns(), err)
	}
}

func TestPayloadHTTP(t *testing.T) {
	r := Default()
	in := `{"method":"POST","url":"https://bob:hunter22@api.example.com/v1?api_key=K3Y-VALUE&page=2#frag","headers":{"Authorization":"Bearer abc.def.ghi","X-Trace":"t-1","Cookie":"s=1234"},"body":"hello"}`
	out, secrets := r.Payload("http", json.RawMessage(in))
	s := string(out)
	for _, secret := range []string{"hunter22", "K3Y-VALUE", "abc.def.ghi", "s=1234"} {
		if strings.Contains(s, secret) {
			t.Errorf("redacted payload holds %q: %s", secret, s)
		}
	}
	for _, kept := range []string{"t-1", "page=2", "#frag", Mask + ":" + Mask + "@api.example.com", "api_key=" + Mask, "hello"} {
		if !strings.Contains(s, kept) {
			t.Errorf("redacted payload lost %q: %s", kept, s)
		}
	}
	msg := Scrub("401 from server: you sent Authorization: Bearer abc.def.ghi and token abc.def.ghi; url ?api_key=K3Y-VALUE", secrets)
	if strings.Contains(msg, "abc.def.ghi") || strings.Contains(msg, "K3Y-VALUE") {
		t.Errorf("Scrub left a secret: %s", msg)
	}
	// The handler's payload is untouched: Payload returns a copy.
	if !strings.Contains(in, "hunter22") {
		t.Fatal("the input changed")
	}
	// Restore puts the secrets back, and keeps the edit.
	edited := strings.Replace(s, `"hello"`, `"bye"`, 1)
	edited = strings.Replace(edited, "page=2", "page=3", 1)
	back, err := Restore("http", json.RawMessage(edited), json.RawMessage(in))
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	json.Unmarshal(back, &got)
	json.Unmarshal([]byte(strings.NewReplacer(`"hello"`, `"bye"`, "page=2", "page=3").Replace(in)), &want)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("Restore:\n got %s\nwant %s", gb, wb)
	}
}

func TestRestoreRefusesMaskWithoutValue(t *testing.T) {
	stored := `{"url":"https://a.example/","headers":{"Authorization":"Bearer x1234"}}`
	for _, edited := range []string{
		`{"url":"https://a.example/","headers":{"X-Api-Key":"•••"}}`,
		`{"url":"https://u:•••@a.example/","headers":{}}`,
		`{"url":"https://a.example/?token=•••","headers":{}}`,
		`{"url":"https://a.example/•••","headers":{}}`,
	} {
		if out, err := Restore("http", json.RawMessage(edited), json.RawMessage(stored)); err == nil {
			t.Errorf("Restore(%s) = %s, want an error", edited, out)
		}
	}
	same := json.RawMessage(`{"url":"https://a.example/" , "n": 1.50}`)
	if out, err := Restore("http", same, json.RawMessage(stored)); err != nil || string(out) != string(same) {
		t.Errorf("a payload without the mask changed: %s, %v", out, err)
	}
}

func TestPayloadFields(t *testing.T) {
	r := Default()
	in := `{"user":{"name":"ann","password":"pa55word","api_key":12345678},"items":[{"refresh_token":"rt-xyz-1"}],"key":"obj/1","n":1.50}`
	out, secrets := r.Payload("email", json.RawMessage(in))
	s := string(out)
	for _, secret := range []string{"pa55word", "12345678", "rt-xyz-1"} {
		if strings.Contains(s, secret) {
			t.Errorf("%s holds %q", s, secret)
		}
	}
	for _, kept := range []string{`"ann"`, `"obj/1"`, `1.50`} {
		if !strings.Contains(s, kept) {
			t.Errorf("%s lost %s", s, kept)
		}
	}
	if len(secrets) != 3 {
		t.Errorf("secrets = %q", secrets)
	}
	back, err := Restore("email", out, json.RawMessage(in))
	if err != nil || strings.Count(string(back), Mask) != 0 || !strings.Contains(string(back), "pa55word") {
		t.Errorf("Restore = %s, %v", back, err)
	}
	off := &Redactor{Headers: MustNew(DefaultHeaders), Fields: &Matcher{}}
	if out, _ := off.Payload("email", json.RawMessage(in)); string(out) != in {
		t.Errorf("with no field patterns the payload changed: %s", out)
	}
}

// globRef is the reference of glob: a regular expression.
func globRef(p, s string) bool {
	parts := strings.Split(p, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(s)
}

func FuzzGlob(f *testing.F) {
	f.Add("*token*", "x-auth-token")
	f.Add("a*b*c", "aXbYbc")
	f.Add("*key", "keyx")
	f.Add("**a", "a")
	f.Fuzz(func(t *testing.T, p, s string) {
		if !utf8.ValidString(p) || !utf8.ValidString(s) {
			t.Skip() // the reference, a regular expression, takes only UTF-8
		}
		if got, want := glob(p, s), globRef(p, s); got != want {
			t.Fatalf("glob(%q, %q) = %v, want %v", p, s, got, want)
		}
	})
}

// FuzzPayload checks that a secret header value, a URL password and a
// secret query value never survive redaction, that the result is JSON,
// and that Restore brings the payload back.
func FuzzPayload(f *testing.F) {
	f.Add("Authorization", "Bearer s3cr3t", "pw0rd", "api_token", "qv4lue")
	f.Add("X-Api-Key", "•••", "", "x", "y")
	f.Add("Cookie", "a\"b\\c", "p@ss:w", "KEY", "v%20w")
	f.Fuzz(func(t *testing.T, header, value, password, qname, qvalue string) {
		if !utf8.ValidString(header+value+password+qname+qvalue) || strings.ContainsAny(password+qname+qvalue, "/?#@&=") ||
			strings.Contains(header+value+password+qname+qvalue, Mask) || strings.ContainsRune(value+password+qvalue, utf8.RuneError) {
			t.Skip()
		}
		u := "https://user"
		if password != "" {
			u += ":" + password
		}
		u += "@h.example/p?" + qname + "=" + qvalue + "&n=1"
		p := map[string]any{"url": u, "headers": map[string]string{header: value, "Accept": "x"}}
		in, _ := json.Marshal(p)
		r := Default()
		out, secrets := r.Payload("http", in)
		if !json.Valid(out) {
			t.Fatalf("not JSON: %s", out)
		}
		var got struct {
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if r.Headers.Match(header) && value != "" && got.Headers[header] != Mask {
			t.Fatalf("header %q: %q not masked", header, got.Headers[header])
		}
		if password != "" && strings.Contains(got.URL, ":"+password+"@") {
			t.Fatalf("password kept: %s", got.URL)
		}
		if r.Headers.Match(qname) && qvalue != "" && strings.Contains(got.URL, "="+qvalue+"&") {
			t.Fatalf("query value kept: %s", got.URL)
		}
		for _, s := range secrets {
			// A secret within the mask ("••") is masked, yet found in
			// the mask that replaced it.
			if len(s) >= MinSecret && !strings.Contains(Mask, s) && strings.Contains(Scrub("x"+s+"y", secrets), s) {
				t.Fatalf("Scrub kept %q", s)
			}
		}
		back, err := Restore("http", out, in)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		var a, b any
		json.Unmarshal(back, &a)
		json.Unmarshal(in, &b)
		ab, _ := json.Marshal(a)
		bb, _ := json.Marshal(b)
		if string(ab) != string(bb) {
			t.Fatalf("Restore:\n got %s\nwant %s", ab, bb)
		}
	})
}

// TestPayloadFieldNamesAnyCase: the http and download handlers decode
// their payloads with encoding/json, which matches a field's name
// ignoring case (Unicode simple folding: "ſ" is an "s", "K" a "k"), so a
// payload written {"URL": ..., "Headers": ...} (the default casing of
// some languages' serializers) is the request it names. Its secrets are
// masked all the same, and an edit sending the masks back restores them.
func TestPayloadFieldNamesAnyCase(t *testing.T) {
	r := Default()
	for _, names := range [][2]string{{"URL", "Headers"}, {"Url", "HEADERS"}, {"uRl", "HEADERſ"}, {"url", "headers"}} {
		in := `{"` + names[0] + `":"https://bob:hunter22@api.example.com/?api_key=K3Y-VALUE","` + names[1] + `":{"Authorization":"Bearer abc.def.ghi"}}`
		for _, kind := range []string{"http", "download"} {
			out, secrets := r.Payload(kind, json.RawMessage(in))
			for _, secret := range []string{"hunter22", "K3Y-VALUE", "abc.def.ghi"} {
				if strings.Contains(string(out), secret) {
					t.Errorf("%s %s: redacted payload holds %q: %s", kind, in, secret, out)
				}
			}
			if len(secrets) < 3 {
				t.Errorf("%s %s: secrets %q", kind, in, secrets)
			}
			back, err := Restore(kind, out, json.RawMessage(in))
			if err != nil || HasMask(back) {
				t.Fatalf("%s: Restore(%s) = %s, %v", kind, out, back, err)
			}
			var got, want any
			if err := json.Unmarshal(back, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Errorf("%s: Restore:\n got %s\nwant %s", kind, gb, wb)
			}
		}
	}
}

// TestPayloadDuplicateKeys: a payload may hold a key twice (a client
// other than the REST API wrote it: the Go client, a broker's dead
// letter). encoding/json keeps the last value of a scalar field but
// merges the objects of a map field, so an http handler sends the
// headers of both "headers" objects. No secret of any of them is shown,
// and each is among the secrets masked in texts.
func TestPayloadDuplicateKeys(t *testing.T) {
	r := Default()
	for _, c := range []struct {
		kind, in, secret string
	}{
		{"http", `{"url":"https://x.example/","headers":{"Authorization":"Bearer s3cret-one"},"headers":{"X-A":"1"}}`, "Bearer s3cret-one"},
		{"download", `{"url":"https://x.example/","Headers":{"Cookie":"s3cret-two"},"headers":{"Accept":"*/*"}}`, "s3cret-two"},
		{"http", `{"url":"https://x.example/","headers":{"Authorization":"Bearer s3cret-three","Authorization":""}}`, "Bearer s3cret-three"},
		{"http", `{"url":"https://u:s3cret-four@x.example/","url":"https://x.example/"}`, "s3cret-four"},
		{"email", `{"password":"s3cret-five","password":""}`, "s3cret-five"},
		{"email", `{"user":{"api_key":"s3cret-six","api_key":null}}`, "s3cret-six"},
	} {
		out, secrets := r.Payload(c.kind, json.RawMessage(c.in))
		if strings.Contains(string(out), "s3cret") {
			t.Errorf("%s %s: redacted payload holds the secret: %s", c.kind, c.in, out)
		}
		if Scrub("echo "+c.secret, secrets) == "echo "+c.secret {
			t.Errorf("%s %s: secrets %q miss %q", c.kind, c.in, secrets, c.secret)
		}
	}
}

// TestRestoreMaskSpelledWithEscapes: JSON may spell the mask's bullets
// as \u2022 escapes, all or some: the edit still keeps the stored
// secret, never writes the mask over it.
func TestRestoreMaskSpelledWithEscapes(t *testing.T) {
	stored := json.RawMessage(`{"user":{"password":"s3cret-pw"},"n":1}`)
	for _, edited := range []string{
		`{"user":{"password":"\u2022\u2022\u2022"},"n":2}`,
		`{"user":{"password":"\u2022••"},"n":2}`,
		`{"user":{"password":"•\u2022•"},"n":2}`,
	} {
		if !HasMask([]byte(edited)) {
			t.Errorf("HasMask(%s) = false", edited)
		}
		out, err := Restore("email", json.RawMessage(edited), stored)
		if err != nil {
			t.Fatalf("Restore(%s): %v", edited, err)
		}
		var v struct {
			User struct {
				Password string `json:"password"`
			} `json:"user"`
			N int `json:"n"`
		}
		if err := json.Unmarshal(out, &v); err != nil || v.User.Password != "s3cret-pw" || v.N != 2 {
			t.Errorf("Restore(%s) = %s, want the stored password kept", edited, out)
		}
	}
	if HasMask([]byte(`{"bullet":"• a list", "two":"••"}`)) {
		t.Error("HasMask took bullets for the mask")
	}
}
