// Package redact masks secrets in job payloads and in the texts that may
// echo them (errors, notes), for the API's reads, the dashboard and logs:
// the values of http and download payloads' headers named like secrets,
// the password of a URL's user information and the values of query
// parameters named like secrets, and, in payloads of other kinds, JSON
// fields named like secrets at any depth. A masked value reads Mask.
//
// Names are matched by Matcher: case-insensitive patterns where "*"
// stands for any run of characters (none included) and every other
// character stands for itself; a pattern matches a whole name.
package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Mask is what a secret is shown as.
const Mask = "•••"

// DefaultHeaders are the patterns of the header and query parameter names
// whose values are secrets, unless configured otherwise.
var DefaultHeaders = []string{"authorization", "proxy-authorization", "cookie", "set-cookie",
	"*token*", "*secret*", "*key*", "*password*", "*passwd*", "*credential*", "*signature*"}

// DefaultFields are the patterns of the JSON field names, in payloads of
// kinds other than http and download, whose values are secrets, unless
// configured otherwise. Narrower than DefaultHeaders: "*key*" would mask
// ordinary fields such as an object's key or an idempotency key.
var DefaultFields = []string{"authorization", "cookie", "*token*", "*secret*", "*password*", "*passwd*",
	"*credential*", "*api_key*", "*apikey*", "*api-key*", "*private_key*"}

// Limits of a pattern list.
const (
	// MaxPatterns is the most patterns a list may hold.
	MaxPatterns = 100
	// MaxPatternLen is the longest pattern, in bytes.
	MaxPatternLen = 256
	// MinSecret is the length, in bytes, below which a secret value is
	// not searched for in texts (Scrub): masking every "1" of an error
	// message would hide it without protecting anything.
	MinSecret = 4
)

// Matcher matches names against patterns. The zero Matcher (and a nil
// one) matches nothing.
type Matcher struct {
	patterns []string // lower-cased
}

// New returns a Matcher of patterns, checked as Parse checks them.
func New(patterns []string) (*Matcher, error) {
	if len(patterns) > MaxPatterns {
		return nil, fmt.Errorf("%d patterns: at most %d", len(patterns), MaxPatterns)
	}
	m := &Matcher{}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return nil, fmt.Errorf("an empty pattern (to redact nothing, give \"none\")")
		case len(p) > MaxPatternLen:
			return nil, fmt.Errorf("pattern %.40q...: longer than %d bytes", p, MaxPatternLen)
		case strings.Trim(p, "*") == "":
			return nil, fmt.Errorf("pattern %q matches every name", p)
		}
		for _, r := range p {
			if r < 0x20 || r == 0x7f || r == ',' {
				return nil, fmt.Errorf("pattern %q: holds a control character or a comma", p)
			}
		}
		m.patterns = append(m.patterns, strings.ToLower(p))
	}
	return m, nil
}

// MustNew is New for lists known to be valid (the defaults).
func MustNew(patterns []string) *Matcher {
	m, err := New(patterns)
	if err != nil {
		panic(err)
	}
	return m
}

// Parse parses a comma-separated list of patterns; "none" is the empty
// list (nothing is redacted).
func Parse(s string) (*Matcher, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "none") {
		return &Matcher{}, nil
	}
	return New(strings.Split(s, ","))
}

// Patterns returns m's patterns, lower-cased.
func (m *Matcher) Patterns() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.patterns...)
}

// Match reports whether name matches one of m's patterns, ignoring case.
func (m *Matcher) Match(name string) bool {
	if m == nil || len(m.patterns) == 0 {
		return false
	}
	lower := strings.ToLower(name)
	for _, p := range m.patterns {
		if glob(p, lower) {
			return true
		}
	}
	return false
}

// glob reports whether s matches pattern p, where '*' stands for any run
// of bytes. It backtracks to the last star only, so it runs in
// O(len(p)*len(s)) at worst.
func glob(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && p[pi] == s[si]:
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Redactor masks the secrets of payloads: Headers names the secret
// headers and query parameters of the http and download kinds' payloads,
// Fields the secret JSON fields of other kinds' payloads. A nil Redactor
// masks nothing.
type Redactor struct {
	Headers *Matcher
	Fields  *Matcher
}

// Default returns a Redactor of DefaultHeaders and DefaultFields.
func Default() *Redactor {
	return &Redactor{Headers: MustNew(DefaultHeaders), Fields: MustNew(DefaultFields)}
}

// requestKind reports whether kind's payloads describe an HTTP request
// ({url, headers, ...}): the built-in http and download kinds.
func requestKind(kind string) bool {
	return kind == "http" || kind == "download"
}

// Payload returns payload with its secrets masked, and the secret values
// it masked (for Scrub). A payload that is not JSON is returned as it is
// for a request kind (its handler refuses it, so it carries no working
// secret), and masked whole when it holds something that looks like one.
func (r *Redactor) Payload(kind string, payload json.RawMessage) (json.RawMessage, []string) {
	if r == nil || len(payload) == 0 {
		return payload, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		return payload, nil
	}
	var secrets []string
	// A key given twice: the decoded value kept the last one only, so
	// the payload is shown as decoded (and masked), never as written,
	// and the secrets of every occurrence are collected for Scrub (an
	// http handler merges the objects of "headers" given twice).
	changed := hasDuplicateKey(payload)
	if changed {
		if requestKind(kind) {
			secrets = r.requestSecrets(payload)
		} else if r.Fields != nil && len(r.Fields.patterns) > 0 {
			secrets = r.fieldSecrets(payload, 0)
		}
	}
	if requestKind(kind) {
		obj, ok := v.(map[string]any)
		if !ok {
			return payload, nil
		}
		// The handlers decode with encoding/json, which takes a field
		// whose name matches ignoring case ("URL", "Headers", "Body")
		// for url, headers or body: mask every such field.
		var ctype string
		for key, fv := range obj {
			if strings.EqualFold(key, "headers") {
				ctype = contentType(fv)
			}
		}
		for key, fv := range obj {
			switch {
			case strings.EqualFold(key, "body"):
				b, ok := fv.(string)
				if !ok {
					continue
				}
				if masked, found := r.maskBody(b, ctype); len(found) > 0 {
					obj[key] = masked
					secrets = append(secrets, found...)
					changed = true
				}
			case strings.EqualFold(key, "headers"):
				hs, ok := fv.(map[string]any)
				if !ok {
					continue
				}
				for name, hv := range hs {
					s, ok := hv.(string)
					if !ok || s == "" || s == Mask || !r.Headers.Match(name) {
						continue
					}
					secrets = append(secrets, valueSecrets(s)...)
					hs[name] = Mask
					changed = true
				}
			case strings.EqualFold(key, "url"):
				u, ok := fv.(string)
				if !ok {
					continue
				}
				if masked, found := r.URL(u); len(found) > 0 {
					obj[key] = masked
					secrets = append(secrets, found...)
					changed = true
				}
			}
		}
	} else if r.Fields != nil && len(r.Fields.patterns) > 0 {
		v = r.fields(v, &secrets, &changed)
	}
	if !changed {
		return payload, nil
	}
	return marshal(v), dedupe(secrets)
}

// maxSecretDepth bounds the depth at which fieldSecrets looks for the
// secrets of a payload holding a duplicate key.
const maxSecretDepth = 64

// hasDuplicateKey reports whether data, valid JSON, holds an object with
// a key twice, at any depth.
func hasDuplicateKey(data []byte) bool {
	type level struct {
		obj     bool
		wantKey bool
		keys    map[string]bool
	}
	var stack []*level
	done := func() { // a value ended: the enclosing object wants a key
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				done()
				continue
			}
			k, _ := tok.(string)
			if stack[n-1].keys[k] {
				return true
			}
			stack[n-1].keys[k], stack[n-1].wantKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{obj: true, wantKey: true, keys: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &level{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		done()
	}
}

// members returns the members of data, a JSON object, in order, keys
// given twice included; ok is false when data is not an object.
func members(data []byte) (keys []string, vals []json.RawMessage, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return keys, vals, true
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return keys, vals, true
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, true
}

// requestSecrets returns the secrets of every url and headers member of
// a request kind's payload, whatever their case and however many.
func (r *Redactor) requestSecrets(data []byte) []string {
	var out []string
	keys, vals, _ := members(data)
	for i, k := range keys {
		switch {
		case strings.EqualFold(k, "headers"):
			names, hv, _ := members(vals[i])
			for j, name := range names {
				var s string
				if json.Unmarshal(hv[j], &s) == nil && s != "" && s != Mask && r.Headers.Match(name) {
					out = append(out, valueSecrets(s)...)
				}
			}
		case strings.EqualFold(k, "url"):
			var u string
			if json.Unmarshal(vals[i], &u) == nil {
				_, found := r.URL(u)
				out = append(out, found...)
			}
		case strings.EqualFold(k, "body"):
			// Read as JSON and as a form alike: the content type of
			// headers given twice is not known here.
			var b string
			if json.Unmarshal(vals[i], &b) == nil {
				_, found := r.maskBody(b, "application/x-www-form-urlencoded")
				out = append(out, found...)
			}
		}
	}
	return out
}

// fieldSecrets returns the values of every field named like a secret in
// data, duplicates included, to maxSecretDepth.
func (r *Redactor) fieldSecrets(data []byte, depth int) []string {
	if depth > maxSecretDepth {
		return nil
	}
	var out []string
	if keys, vals, ok := members(data); ok {
		for i, k := range keys {
			if r.Fields.Match(k) {
				var v any
				if decode(vals[i], &v) == nil && !isEmpty(v) {
					out = append(out, leaves(v)...)
				}
				continue
			}
			out = append(out, r.fieldSecrets(vals[i], depth+1)...)
		}
		return out
	}
	var elems []json.RawMessage
	if json.Unmarshal(data, &elems) == nil {
		for _, e := range elems {
			out = append(out, r.fieldSecrets(e, depth+1)...)
		}
	}
	return out
}

// fields masks, at any depth, the values of the fields named like
// secrets.
func (r *Redactor) fields(v any, secrets *[]string, changed *bool) any {
	switch t := v.(type) {
	case map[string]any:
		for k, fv := range t {
			if r.Fields.Match(k) {
				if isEmpty(fv) {
					continue
				}
				*secrets = append(*secrets, leaves(fv)...)
				t[k] = Mask
				*changed = true
				continue
			}
			t[k] = r.fields(fv, secrets, changed)
		}
	case []any:
		for i, e := range t {
			t[i] = r.fields(e, secrets, changed)
		}
	}
	return v
}

// isEmpty reports whether v holds nothing to hide: null, "" or the mask.
func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == "" || t == Mask
	}
	return false
}

// leaves returns the string and number values in v, for Scrub.
func leaves(v any) []string {
	switch t := v.(type) {
	case string:
		return valueSecrets(t)
	case json.Number:
		return []string{t.String()}
	case map[string]any:
		var out []string
		for _, e := range t {
			out = append(out, leaves(e)...)
		}
		return out
	case []any:
		var out []string
		for _, e := range t {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return nil
}

// valueSecrets returns a secret header value and, for a value of the form
// "Scheme credentials" (Authorization: Bearer ...), its credentials, which
// a message may echo alone.
func valueSecrets(s string) []string {
	out := []string{s}
	if i := strings.IndexByte(s, ' '); i > 0 {
		if rest := strings.TrimSpace(s[i+1:]); rest != "" {
			out = append(out, rest)
		}
	}
	return out
}

// URL returns raw with its user information (the user name and the
// password: a token is often the user name) and the values of its query
// parameters named like secrets (r.Headers) masked,
// and the values it masked (raw and unescaped). The rest of raw is kept
// as it was written.
func (r *Redactor) URL(raw string) (string, []string) {
	if r == nil {
		return raw, nil
	}
	p := splitURL(raw)
	var secrets []string
	for _, part := range []*string{&p.user, &p.password} {
		if *part == "" || *part == Mask {
			continue
		}
		secrets = append(secrets, *part)
		if dec, err := url.PathUnescape(*part); err == nil && dec != *part {
			secrets = append(secrets, dec)
		}
		*part = Mask
	}
	for i := range p.query {
		q := &p.query[i]
		if q.value == "" || q.value == Mask || !q.hasValue {
			continue
		}
		name, err := url.QueryUnescape(q.name)
		if err != nil {
			name = q.name
		}
		if !r.Headers.Match(name) {
			continue
		}
		secrets = append(secrets, q.value)
		if dec, err := url.QueryUnescape(q.value); err == nil && dec != q.value {
			secrets = append(secrets, dec)
		}
		q.value = Mask
	}
	if len(secrets) == 0 {
		return raw, nil
	}
	return p.String(), secrets
}

// urlParts is a URL split where its secrets may be, keeping every other
// byte as written: prefix (scheme and "//"), the user information (the
// user name, and the password after its ":"), the rest of the authority
// (from its "@") and the path, the query's parameters, and the fragment.
type urlParts struct {
	prefix      string
	hasUser     bool // user information, "@" included in middle
	user        string
	hasPassword bool
	password    string
	middle      string
	hasQuery    bool
	query       []param
	fragment    string // with its '#'
}

// param is one name[=value] of a query.
type param struct {
	name     string
	hasValue bool
	value    string
}

// splitURL splits raw into its parts; a raw URL without an authority or
// query yields only a prefix (and fragment).
func splitURL(raw string) urlParts {
	var p urlParts
	rest := raw
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		p.fragment, rest = rest[i:], rest[:i]
	}
	var q string
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		p.hasQuery = true
		q, rest = rest[i+1:], rest[:i]
	}
	if i := strings.Index(rest, "//"); i >= 0 {
		auth := rest[i+2:]
		end := strings.IndexByte(auth, '/')
		if end < 0 {
			end = len(auth)
		}
		if at := strings.LastIndexByte(auth[:end], '@'); at >= 0 {
			userinfo := auth[:at]
			p.prefix, p.hasUser, p.user = rest[:i+2], true, userinfo
			if c := strings.IndexByte(userinfo, ':'); c >= 0 {
				p.user, p.hasPassword, p.password = userinfo[:c], true, userinfo[c+1:]
			}
			p.middle = auth[at:]
			rest = ""
		}
	}
	if !p.hasUser {
		p.prefix = rest
	}
	if p.hasQuery && q != "" {
		for _, kv := range strings.Split(q, "&") {
			name, value, ok := strings.Cut(kv, "=")
			p.query = append(p.query, param{name: name, hasValue: ok, value: value})
		}
	}
	return p
}

// String joins p's parts back.
func (p urlParts) String() string {
	var b strings.Builder
	b.WriteString(p.prefix)
	if p.hasUser {
		b.WriteString(p.user)
		if p.hasPassword {
			b.WriteByte(':')
			b.WriteString(p.password)
		}
		b.WriteString(p.middle)
	}
	if p.hasQuery {
		b.WriteByte('?')
		for i, q := range p.query {
			if i > 0 {
				b.WriteByte('&')
			}
			b.WriteString(q.name)
			if q.hasValue {
				b.WriteByte('=')
				b.WriteString(q.value)
			}
		}
	}
	b.WriteString(p.fragment)
	return b.String()
}

// Scrub returns s with every occurrence of the secrets masked (secrets
// shorter than MinSecret bytes are left: see MinSecret), longest first so
// that a secret holding another is masked whole.
func Scrub(s string, secrets []string) string {
	if s == "" || len(secrets) == 0 {
		return s
	}
	list := dedupe(secrets)
	sort.SliceStable(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	for _, sec := range list {
		if len(sec) < MinSecret || sec == Mask {
			continue
		}
		s = strings.ReplaceAll(s, sec, Mask)
	}
	return s
}

// dedupe returns list without repeats, in its order.
func dedupe(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := list[:0:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// marshal encodes v as compact JSON without escaping HTML characters (a
// payload reads as it was written: "<" stays "<").
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Values decoded from JSON always encode.
		panic(err)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// HasMask reports whether payload holds the mask anywhere: in a string
// of the JSON, however its bullets are spelled (as they are, or as
// \u2022 escapes, all or some), and in a request kind's body, escaped as
// its JSON or its form escapes it; in the bytes, for a payload that is
// not JSON.
func HasMask(payload []byte) bool {
	if !bytes.Contains(payload, []byte("•")) && !bytes.Contains(payload, []byte(`\u2022`)) &&
		!bytes.Contains(bytes.ToLower(payload), []byte(escapedMask[:9])) {
		return false
	}
	var v any
	if err := decode(payload, &v); err != nil {
		return bytes.Contains(payload, []byte(Mask)) || bytes.Contains(payload, []byte(`\u2022\u2022\u2022`))
	}
	return holdsMask(v)
}

// holdsMask reports whether a string of v, a key or a value, holds the
// mask.
func holdsMask(v any) bool {
	switch t := v.(type) {
	case string:
		// A request kind's body may hold it escaped (see bodyHoldsMask).
		return strings.Contains(t, Mask) || bodyHoldsMask(t)
	case map[string]any:
		for k, e := range t {
			if strings.Contains(k, Mask) || holdsMask(e) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if holdsMask(e) {
				return true
			}
		}
	}
	return false
}

// Restore returns edited, a payload written over a redacted one (the
// dashboard's editor, an API client that read a job and sends it back),
// with each masked value replaced by the value stored at the same place:
// a field or header whose value is Mask keeps the stored one, and, in a
// request kind's URL, a masked password or query parameter value keeps
// the stored one. Everything else is edited's. An edited payload without
// the mask is returned as it is. A mask with no stored value at its place
// (a header renamed, a field added) is an error naming the place: the
// mask must never be written over a secret, nor sent as one.
func Restore(kind string, edited, stored json.RawMessage) (json.RawMessage, error) {
	if !HasMask(edited) {
		return edited, nil
	}
	var e, s any
	if err := decode(edited, &e); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if err := decode(stored, &s); err != nil {
		// A stored payload that is not JSON has nothing to restore.
		s = nil
	}
	out, err := restore(kind, "payload", e, s)
	if err != nil {
		return nil, err
	}
	return marshal(out), nil
}

// decode decodes one JSON value, keeping numbers as written.
func decode(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// restore is Restore at path.
func restore(kind, path string, e, s any) (any, error) {
	switch t := e.(type) {
	case string:
		if t == Mask {
			if s == nil {
				return nil, fmt.Errorf("%s holds the mask %s, but the stored payload has no value there to keep: give the value itself", path, Mask)
			}
			return s, nil
		}
		// A request kind's body, whatever the case of its name (see
		// Payload and body.go).
		if strings.EqualFold(path, "payload.body") && requestKind(kind) && bodyHoldsMask(t) {
			stored, _ := s.(string)
			return restoreBody(path, t, stored)
		}
		// A request kind's url, whatever the case of its name (see
		// Payload).
		if strings.EqualFold(path, "payload.url") && requestKind(kind) && strings.Contains(t, Mask) {
			stored, _ := s.(string)
			return restoreURL(path, t, stored)
		}
		return t, nil
	case map[string]any:
		sm, _ := s.(map[string]any)
		for k, v := range t {
			var sv any
			if sm != nil {
				sv = sm[k]
			}
			r, err := restore(kind, path+"."+k, v, sv)
			if err != nil {
				return nil, err
			}
			t[k] = r
		}
		return t, nil
	case []any:
		sa, _ := s.([]any)
		for i, v := range t {
			var sv any
			if i < len(sa) {
				sv = sa[i]
			}
			r, err := restore(kind, fmt.Sprintf("%s[%d]", path, i), v, sv)
			if err != nil {
				return nil, err
			}
			t[i] = r
		}
		return t, nil
	}
	return e, nil
}

// restoreURL restores the masked user name, password and query values of an edited
// URL from the stored one: a masked query value keeps the value of the
// stored parameter of the same name and rank among those of its name.
func restoreURL(path, edited, stored string) (string, error) {
	ep, sp := splitURL(edited), splitURL(stored)
	if ep.hasUser && ep.user == Mask {
		if !sp.hasUser || sp.user == "" {
			return "", fmt.Errorf("%s: its user name is the mask %s, but the stored URL has none to keep: give the user name itself", path, Mask)
		}
		ep.user = sp.user
	}
	if ep.hasPassword && ep.password == Mask {
		if !sp.hasPassword {
			return "", fmt.Errorf("%s: its password is the mask %s, but the stored URL has none to keep: give the password itself", path, Mask)
		}
		ep.password = sp.password
	}
	rank := map[string]int{}
	for i := range ep.query {
		q := &ep.query[i]
		n := rank[q.name]
		rank[q.name]++
		if q.value != Mask {
			continue
		}
		found := false
		for _, sq := range sp.query {
			if sq.name != q.name {
				continue
			}
			if n == 0 {
				q.value, found = sq.value, true
				break
			}
			n--
		}
		if !found {
			return "", fmt.Errorf("%s: query parameter %q is the mask %s, but the stored URL has no value there to keep: give the value itself", path, q.name, Mask)
		}
	}
	out := ep.String()
	if strings.Contains(out, Mask) {
		return "", fmt.Errorf("%s holds the mask %s where the stored URL has no secret: give the value itself", path, Mask)
	}
	return out, nil
}

// Error returns err with the secrets masked in its message (Scrub). It
// unwraps to err, so that errors.Is and errors.As (the classification of
// a failure) see err itself; an error whose message holds no secret is
// returned as it is.
func Error(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	if s := Scrub(msg, secrets); s != msg {
		return &scrubbed{err: err, msg: s}
	}
	return err
}

// scrubbed is an error whose message has its secrets masked.
type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// ForHeaders returns a Redactor of the header patterns (nil: the
// defaults; an invalid list: the defaults, the safe side) and no field
// patterns: what the http and download handlers mask in their errors.
func ForHeaders(patterns []string) *Redactor {
	r := &Redactor{Headers: MustNew(DefaultHeaders), Fields: &Matcher{}}
	if patterns != nil {
		if m, err := New(patterns); err == nil {
			r.Headers = m
		}
	}
	return r
}
