// Package httpreq is what the built-in kinds that make HTTP requests
// (http and download) share about the request a payload describes: its
// timeout, its header names, and its URL fit for logs and errors.
package httpreq

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Timeout parses a payload's timeout: a Go duration such as example
// ("30s"), or a number of seconds; positive and at most max. An absent or
// null timeout is def.
func Timeout(raw json.RawMessage, def, max time.Duration, example string) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var d time.Duration
	var s string
	var secs float64
	switch {
	case json.Unmarshal(raw, &s) == nil:
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("timeout %q: want a duration such as %q", s, example)
		}
	case json.Unmarshal(raw, &secs) == nil:
		if secs > max.Seconds() {
			return 0, fmt.Errorf("timeout %gs is above the limit of %s", secs, max)
		}
		d = time.Duration(secs * float64(time.Second))
	default:
		return 0, fmt.Errorf("timeout %s: want a duration such as %q or a number of seconds", raw, example)
	}
	if d <= 0 {
		return 0, fmt.Errorf("timeout %s must be positive", d)
	}
	if d > max {
		return 0, fmt.Errorf("timeout %s is above the limit of %s", d, max)
	}
	return d, nil
}

// ValidHeaderName reports whether s is an HTTP header name (a token of
// at most 256 bytes).
func ValidHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Redact returns u without user information, query or fragment, fit for
// logs and errors.
func Redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}
