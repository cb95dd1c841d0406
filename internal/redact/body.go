package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strings"
)

// The body of a request kind's payload (its "body" string) is sent as
// is, and often carries a credential: an OAuth token request's
// client_secret, in JSON or in a form. Payload masks, inside the body,
// the values of the JSON fields (at any depth) and of the form fields
// whose names match the Headers patterns, the list of the request kinds;
// everything else of the body is kept byte for byte, so that a body read
// masked and sent back by Restore is the stored one.
//
// Which syntax a body is read in: a body that is a JSON object or array
// is read as JSON, whatever its content type; otherwise, a body whose
// content type (the payload's Content-Type header) is
// application/x-www-form-urlencoded is read as a form, and a body without
// that content type only when it looks like one (name=value pairs joined
// by "&", no white space, no JSON or markup characters). A body that is
// neither (plain text, XML, a multipart body) is shown as it is.

// bodyKind is how a body is read.
type bodyKind int

const (
	bodyOther bodyKind = iota
	bodyJSON
	bodyForm
)

// kindOfBody returns how body is read, ctype being the payload's content
// type ("" when it has none).
func kindOfBody(body, ctype string) bodyKind {
	t := strings.TrimLeft(body, " \t\r\n")
	if t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(body)) {
		return bodyJSON
	}
	mt, _, _ := mime.ParseMediaType(ctype)
	if mt == "application/x-www-form-urlencoded" {
		if strings.Contains(body, "=") {
			return bodyForm
		}
		return bodyOther
	}
	if looksLikeForm(body) {
		return bodyForm
	}
	return bodyOther
}

// looksLikeForm reports whether s reads as an url-encoded form without a
// content type saying so: name=value pairs joined by "&" (a trailing "&"
// allowed), each name not empty, valid escapes, and none of the bytes a
// form escapes that other texts hold (white space, quotes, braces,
// angle brackets, controls).
func looksLikeForm(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f || strings.IndexByte("\"'{}<>\\`", c) >= 0 {
			return false
		}
	}
	for _, kv := range strings.Split(strings.TrimSuffix(s, "&"), "&") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return false
		}
		if _, err := url.QueryUnescape(name); err != nil {
			return false
		}
		if _, err := url.QueryUnescape(value); err != nil {
			return false
		}
	}
	return true
}

// contentType returns the value of the Content-Type header of headers (a
// JSON object), whatever the case of its name; "" when there is none.
func contentType(headers any) string {
	hs, _ := headers.(map[string]any)
	for name, v := range hs {
		if strings.EqualFold(name, "content-type") {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	return ""
}

// span is a part of a body to replace: [start, end) by with.
type span struct {
	start, end int
	with       string
}

// replaceSpans returns s with the spans, in order and apart, replaced.
func replaceSpans(s string, spans []span) string {
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString(sp.with)
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// step is one step of a path in a JSON value: a member (its key and its
// rank among the members of that key, a key given twice) or an element.
type step struct {
	member bool
	key    string
	rank   int
	index  int
}

// visitJSON calls fn with each member value and element of data, a JSON
// value, at any depth to maxSecretDepth: its path, its offsets in data
// (base added) and its bytes; fn returns whether to look inside it. It
// returns false when data cannot be walked (not JSON).
func visitJSON(data []byte, base int, path []step, depth int, fn func(path []step, start, end int, v json.RawMessage) bool) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	d, _ := tok.(json.Delim)
	if d != '{' && d != '[' {
		return true
	}
	ranks := map[string]int{}
	for i := 0; dec.More(); i++ {
		st := step{index: i}
		if d == '{' {
			kt, err := dec.Token()
			if err != nil {
				return false
			}
			k, _ := kt.(string)
			st = step{member: true, key: k, rank: ranks[k]}
			ranks[k]++
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
		end := int(dec.InputOffset())
		start := end - len(v)
		if start < 0 || !bytes.Equal(data[start:end], v) {
			return false
		}
		p := append(path[:len(path):len(path)], st)
		if fn(p, base+start, base+end, v) && depth < maxSecretDepth {
			if !visitJSON(v, base+start, p, depth+1, fn) {
				return false
			}
		}
	}
	return true
}

// lookupJSON returns the value at path in data, a JSON value.
func lookupJSON(data []byte, path []step) (json.RawMessage, bool) {
	cur := json.RawMessage(data)
	for _, st := range path {
		if st.member {
			keys, vals, ok := members(cur)
			if !ok {
				return nil, false
			}
			found := false
			for i, k := range keys {
				if k != st.key {
					continue
				}
				if n := st.rank; n > 0 {
					st.rank--
					continue
				}
				cur, found = vals[i], true
				break
			}
			if !found {
				return nil, false
			}
			continue
		}
		var elems []json.RawMessage
		if json.Unmarshal(cur, &elems) != nil || st.index >= len(elems) {
			return nil, false
		}
		cur = elems[st.index]
	}
	return cur, true
}

// pathString words path for an error: body.a.b[2].
func pathString(prefix string, path []step) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, st := range path {
		if st.member {
			b.WriteString(".")
			b.WriteString(st.key)
		} else {
			fmt.Fprintf(&b, "[%d]", st.index)
		}
	}
	return b.String()
}

// maskedJSONValue reports whether v, a JSON value, is the mask.
func maskedJSONValue(v json.RawMessage) bool {
	var s string
	return json.Unmarshal(v, &s) == nil && s == Mask
}

// maskBody returns body with the values of its fields named like secrets
// (r.Headers) masked, and those values; body itself when it holds none.
func (r *Redactor) maskBody(body, ctype string) (string, []string) {
	if r == nil || r.Headers == nil || len(r.Headers.patterns) == 0 || body == "" {
		return body, nil
	}
	var secrets []string
	var spans []span
	switch kindOfBody(body, ctype) {
	case bodyJSON:
		ok := visitJSON([]byte(body), 0, nil, 0, func(path []step, start, end int, v json.RawMessage) bool {
			last := path[len(path)-1]
			if !last.member || !r.Headers.Match(last.key) {
				return true
			}
			var val any
			if decode(v, &val) != nil || isEmpty(val) {
				return false
			}
			secrets = append(secrets, leaves(val)...)
			spans = append(spans, span{start: start, end: end, with: `"` + Mask + `"`})
			return false
		})
		if !ok {
			// Valid JSON always walks; should it not, the body is
			// hidden whole rather than shown with its secrets.
			return Mask, []string{body}
		}
	case bodyForm:
		off := 0
		for _, kv := range strings.Split(body, "&") {
			name, value, ok := strings.Cut(kv, "=")
			start := off + len(name) + 1
			off += len(kv) + 1
			if !ok || value == "" {
				continue
			}
			n, err := url.QueryUnescape(name)
			if err != nil {
				n = name
			}
			if !r.Headers.Match(n) {
				continue
			}
			dec, err := url.QueryUnescape(value)
			if err != nil {
				dec = value
			}
			if dec == Mask {
				continue
			}
			secrets = append(secrets, value)
			if dec != value {
				secrets = append(secrets, dec)
			}
			spans = append(spans, span{start: start, end: start + len(value), with: Mask})
		}
	}
	if len(spans) == 0 {
		return body, nil
	}
	return replaceSpans(body, spans), secrets
}

// escapedMask is the mask as a form escapes it, lower-cased.
const escapedMask = "%e2%80%a2%e2%80%a2%e2%80%a2"

// bodyHoldsMask reports whether body, a request kind's body, holds the
// mask: as it is, in a JSON string of a JSON body (escapes decoded), or
// url-escaped.
func bodyHoldsMask(body string) bool {
	if strings.Contains(body, Mask) || strings.Contains(strings.ToLower(body), escapedMask) {
		return true
	}
	if strings.Contains(strings.ToLower(body), `\u2022`) {
		var v any
		if decode([]byte(body), &v) == nil {
			return holdsMask(v)
		}
	}
	return false
}

// restoreBody returns edited, a request kind's body written over a masked
// one, with each value that is the mask replaced by the stored body's
// value at the same place (the same path of a JSON body; the same name
// and rank among those of its name of a form). A mask anywhere else, or
// with no stored value at its place, is an error.
func restoreBody(path, edited, stored string) (string, error) {
	if edited == stored {
		return edited, nil // unchanged, whatever it holds
	}
	var spans []span
	switch kindOfBody(edited, "application/x-www-form-urlencoded") {
	case bodyJSON:
		var bad error
		ok := visitJSON([]byte(edited), 0, nil, 0, func(p []step, start, end int, v json.RawMessage) bool {
			if bad != nil || !maskedJSONValue(v) {
				return bad == nil
			}
			sv, found := lookupJSON([]byte(stored), p)
			if !found || kindOfBody(stored, "") != bodyJSON || maskedJSONValue(sv) {
				bad = fmt.Errorf("%s holds the mask %s, but the stored body has no value there to keep: give the value itself", pathString(path, p), Mask)
				return false
			}
			spans = append(spans, span{start: start, end: end, with: string(sv)})
			return false
		})
		if bad != nil {
			return "", bad
		}
		if !ok {
			return "", fmt.Errorf("%s: a JSON body that cannot be read", path)
		}
	case bodyForm:
		rank := map[string]int{}
		off := 0
		for _, kv := range strings.Split(edited, "&") {
			name, value, ok := strings.Cut(kv, "=")
			start := off + len(name) + 1
			off += len(kv) + 1
			if !ok {
				continue
			}
			n := rank[name]
			rank[name]++
			if dec, err := url.QueryUnescape(value); err != nil || dec != Mask {
				continue
			}
			found := false
			for _, skv := range strings.Split(stored, "&") {
				sname, svalue, ok := strings.Cut(skv, "=")
				if !ok || sname != name {
					continue
				}
				if n > 0 {
					n--
					continue
				}
				if dec, err := url.QueryUnescape(svalue); err == nil && dec != Mask && svalue != "" {
					spans = append(spans, span{start: start, end: start + len(value), with: svalue})
					found = true
				}
				break
			}
			if !found {
				return "", fmt.Errorf("%s: form field %q is the mask %s, but the stored body has no value there to keep: give the value itself", path, name, Mask)
			}
		}
	}
	out := replaceSpans(edited, spans)
	if bodyHoldsMask(out) {
		return "", fmt.Errorf("%s holds the mask %s where the stored body has no secret: give the value itself", path, Mask)
	}
	return out, nil
}
