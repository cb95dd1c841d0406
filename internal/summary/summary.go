// Package summary describes a job in one line for listings: an HTTP
// request's method and URL, or an excerpt of any other payload, bounded
// in length and with what looks secret left out.
package summary

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/redrivehq/redrive/internal/httpreq"
)

// Max is the most runes a summary has, its final "…" included.
const Max = 120

// maxString is the most runes of one string value shown in an excerpt.
const maxString = 48

// Hidden replaces a value that looks secret, and the query of a URL.
const Hidden = "***"

// Of describes a job of kind with payload in one line of at most Max
// runes. A job of the built-in kinds that make a request ("http",
// "download") is its method and URL, the URL without user information,
// query or fragment, and with "***" for a path segment that looks like a
// token ("POST https://example.com/hook"); any other payload is its
// compact JSON, with each string clipped, each URL of any scheme redacted
// the same way, the user information of a URL inside text and a
// credential ("Bearer ...") replaced by "***", and the value of each key
// that names a secret (password, token, authorization, headers, ...)
// replaced by "***". "" for an empty or null payload.
func Of(kind string, payload json.RawMessage) string {
	if kind == "http" || kind == "download" {
		if s, ok := request(kind, payload); ok {
			return clip(printable(s), Max)
		}
	}
	return excerpt(payload)
}

// request words a payload {"method": ..., "url": ...}: ok is false when it
// has no absolute URL.
func request(kind string, payload json.RawMessage) (string, bool) {
	var p struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	}
	if json.Unmarshal(payload, &p) != nil || p.URL == "" {
		return "", false
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return "", false
	}
	verb := strings.ToUpper(strings.TrimSpace(p.Method))
	switch {
	case kind == "download":
		verb = "download"
	case verb == "":
		verb = "GET"
	case len(verb) > 16 || strings.ContainsFunc(verb, func(r rune) bool { return r < 'A' || r > 'Z' }):
		verb = "?"
	}
	return verb + " " + redactURL(u), true
}

// redactURL is u as httpreq.Redact shows it, with Hidden for a query and
// for each path segment that looks like a token.
func redactURL(u *url.URL) string {
	c := *u
	if c.Opaque == "" {
		segs := strings.Split(c.EscapedPath(), "/")
		hid := false
		for i, seg := range segs {
			if p, err := url.PathUnescape(seg); err == nil && tokenLike(p) {
				segs[i], hid = Hidden, true
			}
		}
		if hid {
			p := strings.Join(segs, "/")
			c.Path, c.RawPath = p, ""
			if q, err := url.PathUnescape(p); err == nil {
				c.Path, c.RawPath = q, p
			}
		}
	}
	s := httpreq.Redact(&c)
	if u.RawQuery != "" {
		s += "?" + Hidden
	}
	return s
}

// uuidRE is a UUID, an id rather than a secret.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// fileRE is a file name's extension (".iso", ".tar.gz"): a segment that
// ends with one names a file, not a secret.
var fileRE = regexp.MustCompile(`\.[A-Za-z][A-Za-z0-9]{0,4}$`)

// tokenLike reports whether a URL path segment looks like a token (a
// webhook's secret, a bot's token): at least 16 runes of letters and
// digits (and - _ : . ~ + =), both present, not a UUID nor a file name
// with its extension.
func tokenLike(seg string) bool {
	if utf8.RuneCountInString(seg) < 16 || uuidRE.MatchString(seg) || fileRE.MatchString(seg) {
		return false
	}
	letter, digit := false, false
	for _, r := range seg {
		switch {
		case r < utf8.RuneSelf && unicode.IsLetter(r):
			letter = true
		case r >= '0' && r <= '9':
			digit = true
		case strings.ContainsRune("-_:.~+=", r):
		default:
			return false
		}
	}
	return letter && digit
}

// credentialRE is the user information of a URL inside text
// ("scheme://user:password@").
var credentialRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#@\s"]*@`)

// schemeRE is the scheme of an absolute URL with an authority.
var schemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*:)?//`)

// redactString is a string value as a summary shows it: a URL (of any
// scheme, or scheme-relative) redacted by redactURL, the user information
// of a URL inside text hidden, a credential ("Bearer ...", "Basic ...")
// hidden whole.
func redactString(v string) string {
	if credential(v) {
		return Hidden
	}
	if schemeRE.MatchString(v) && !strings.ContainsAny(v, " \t\n") {
		if u, err := url.Parse(v); err == nil && u.Host != "" {
			return redactURL(u)
		}
	}
	return credentialRE.ReplaceAllStringFunc(v, func(m string) string {
		scheme, _, _ := strings.Cut(m, "//")
		return scheme + "//" + Hidden + "@"
	})
}

// credential reports whether v is an Authorization header's value.
func credential(v string) bool {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || strings.TrimSpace(rest) == "" {
		return false
	}
	switch strings.ToLower(scheme) {
	case "bearer", "basic", "digest", "token", "bot", "apikey", "negotiate", "ntlm", "hmac", "aws4-hmac-sha256":
		return true
	}
	return false
}

// sensitive reports whether an object key names a secret.
func sensitive(key string) bool {
	k := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == ' ' || r == '.' {
			return -1
		}
		return r
	}, strings.ToLower(key))
	for _, w := range []string{"password", "passwd", "passphrase", "secret", "token", "authorization", "apikey",
		"cookie", "credential", "privatekey", "signature", "session", "headers", "bearer"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	switch k {
	case "auth", "key", "pin", "otp", "ssn", "cvv", "pwd", "pass":
		return true
	}
	return false
}

// frame is one open object or array of the excerpt.
type frame struct {
	object bool
	n      int  // values written so far
	key    bool // an object's next token is a key
}

// excerpt writes payload as compact JSON, stopping past Max runes.
func excerpt(payload json.RawMessage) string {
	if t := bytes.TrimSpace(payload); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var (
		b     strings.Builder
		stack []*frame
	)
	// sep writes what comes before a value or key in the open frame.
	sep := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		switch {
		case f.object && f.key:
			if f.n > 0 {
				b.WriteByte(',')
			}
		case f.object:
			b.WriteByte(':')
		case f.n > 0:
			b.WriteByte(',')
		}
	}
	// wrote records a value (or key) written in the open frame.
	wrote := func(isKey bool) {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if !f.object {
			f.n++
			return
		}
		if isKey {
			f.key = false
			return
		}
		f.key = true
		f.n++
	}
	hide := false // the next value belongs to a key naming a secret
	for utf8.RuneCountInString(b.String()) <= Max {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Not JSON (a store keeps JSON payloads; be safe anyway).
			return clip(printable(strings.Join(strings.Fields(string(payload)), " ")), Max)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			b.WriteRune(rune(d))
			stack = stack[:len(stack)-1]
			wrote(false)
			continue
		}
		inKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].key
		sep()
		if inKey {
			k, _ := tok.(string)
			b.WriteString(quote(clip(k, maxString)))
			hide = sensitive(k)
			wrote(true)
			continue
		}
		if hide {
			hide = false
			if d, ok := tok.(json.Delim); ok {
				if err := skip(dec, d); err != nil {
					return clip(printable(strings.Join(strings.Fields(string(payload)), " ")), Max)
				}
			}
			b.WriteString(quote(Hidden))
			wrote(false)
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, &frame{object: v == '{', key: v == '{'})
		case string:
			v = redactString(v)
			b.WriteString(quote(clip(v, maxString)))
			wrote(false)
		case json.Number:
			b.WriteString(clip(v.String(), maxString))
			wrote(false)
		case bool:
			if v {
				b.WriteString("true")
			} else {
				b.WriteString("false")
			}
			wrote(false)
		case nil:
			b.WriteString("null")
			wrote(false)
		}
	}
	return clip(b.String(), Max)
}

// skip consumes the rest of the object or array opened by d.
func skip(dec *json.Decoder, d json.Delim) error {
	depth := 1
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// quote is s as a JSON string, without HTML escapes, with its control
// and format characters escaped (see printable).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return printable(strings.TrimSuffix(b.String(), "\n"))
}

// Printable is s safe to show on one line of a terminal or page: each
// control and format character written as its JSON escape (see
// printable).
func Printable(s string) string { return printable(s) }

// printable is s with each control character (C0 and C1: a terminal
// obeys U+009B as it does ESC [) and format character (U+202E reverses
// what follows, U+200B hides) written as its JSON escape, \u009b: a
// summary goes to terminals and pages as it is.
func printable(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, "\\u%04x", u)
		}
	}
	return b.String()
}

// hidden reports whether r is a control or format character.
func hidden(r rune) bool { return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) }

// clip shortens s to at most n runes, the last one "…" when it was cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
