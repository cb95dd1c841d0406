// Package failure classifies errors into the failure classes that drive
// redrive's retry decisions: Transient, RateLimited, Permanent, NeedsAuth and
// Unknown. It provides the wrappers handlers return to mark an error
// explicitly, the HTTP status and network error tables, configurable
// substring and regexp rules, and Retry-After parsing.
//
// The package keeps no global mutable state and performs no I/O of its own;
// the one exception, FromResponse, reads a bounded excerpt of the response
// body it is handed.
package failure

import "fmt"

// Class is the failure class of an error. The zero value is None: no
// failure, the class of a job that never failed.
type Class uint8

// The failure classes, after None (see docs/design.md).
const (
	// None is the zero value: no failure. It is not a failure class:
	// Classify never returns it, Classify treats an explicit wrapper of
	// class None as Unknown, and rules and status overrides refuse it.
	None Class = iota
	// Unknown is any error no rule recognises. It is retried.
	Unknown
	// Transient errors may succeed on retry: timeouts, 5xx, refused or reset
	// connections, DNS failures, an expired lease.
	Transient
	// RateLimited errors are retried no sooner than the server's Retry-After.
	RateLimited
	// Permanent errors will never succeed; the job goes dead at once.
	Permanent
	// NeedsAuth errors (401, 403) go dead at once with reason needs_auth.
	NeedsAuth
)

var classNames = [...]string{
	None:        "none",
	Unknown:     "unknown",
	Transient:   "transient",
	RateLimited: "rate_limited",
	Permanent:   "permanent",
	NeedsAuth:   "needs_auth",
}

// Classes lists every failure class, in declaration order (None, which is
// not one, excluded).
var Classes = []Class{Unknown, Transient, RateLimited, Permanent, NeedsAuth}

// String returns the class's snake_case name, as stored and shown in the API.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Retryable reports whether errors of this class are retried by default.
// Permanent and NeedsAuth are not; every other class is.
func (c Class) Retryable() bool {
	return c != Permanent && c != NeedsAuth
}

// ParseClass parses a failure class name as produced by String. It also
// accepts the CamelCase Go names ("RateLimited") and is case-insensitive.
// It refuses "none", which names no failure class (UnmarshalText accepts
// it).
func ParseClass(s string) (Class, error) {
	switch lower(s) {
	case "unknown":
		return Unknown, nil
	case "transient":
		return Transient, nil
	case "rate_limited", "ratelimited", "rate-limited":
		return RateLimited, nil
	case "permanent":
		return Permanent, nil
	case "needs_auth", "needsauth", "needs-auth":
		return NeedsAuth, nil
	}
	return None, fmt.Errorf("failure: unknown class %q (want unknown, transient, rate_limited, permanent or needs_auth)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler. It accepts what
// MarshalText produces, "none" included.
func (c *Class) UnmarshalText(b []byte) error {
	if lower(string(b)) == "none" {
		*c = None
		return nil
	}
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

func lower(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}
