package failure

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error marks an error with an explicit failure class. It is what Wrap and
// WrapRateLimited return, and it takes precedence over every other
// classification rule: a handler that knows better than the tables says so
// by wrapping.
//
// Error unwraps to its cause, so errors.Is and errors.As keep working on
// the wrapped error.
type Error struct {
	// Class is the class the error is classified as.
	Class Class
	// RetryAfter is the server-requested delay before the next attempt. It
	// is only meaningful when Class is RateLimited; 0 means not given.
	RetryAfter time.Duration
	// Err is the cause. It may be nil.
	Err error
	// Reason, when not empty, is the verdict's reason (short and
	// machine-readable, e.g. ReasonUndecodablePayload) instead of
	// ReasonExplicit.
	Reason string
}

// Error returns the cause's message, or the class name when there is no
// cause.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	if e.Err == nil {
		return e.Class.String()
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Wrap marks err with an explicit class. Return Wrap(Permanent, err) from a
// handler when the error will never succeed, so the job is dead-lettered at
// once instead of retried; Wrap(Transient, err) when it may succeed on retry
// whatever the tables say; Wrap(NeedsAuth, err) for an authentication or
// authorization failure (not retried, dead-lettered with reason needs_auth).
// For a rate limit with a known delay use WrapRateLimited.
//
// Wrap never returns nil. Given a nil err it returns an error whose message
// is the class name ("permanent"), so a handler cannot turn a failure into a
// success by wrapping a nil error by mistake. Classify treats None and
// undefined classes as Unknown.
//
// (Permanent, Transient, NeedsAuth and RateLimited name the Class
// constants, hence one Wrap function taking the class.)
func Wrap(class Class, err error) error { return &Error{Class: class, Err: err} }

// WrapRateLimited marks err as a rate-limit rejection: the job is retried,
// no sooner than after when after is positive. Pass 0 when the server gave
// no delay (Classify then uses the Retry-After of a *StatusError wrapped in
// err, if any); a negative after counts as 0, and Classify caps it at
// MaxRetryAfter. WrapRateLimited never returns nil.
func WrapRateLimited(err error, after time.Duration) error {
	return &Error{Class: RateLimited, RetryAfter: after, Err: err}
}

// StatusError is a non-success HTTP response as an error. Classify maps it
// through the HTTP status table (see StatusClass). Build one with
// FromResponse, or directly when you use another HTTP client.
type StatusError struct {
	// Code is the HTTP status code, e.g. 503.
	Code int
	// Status is the status line as in http.Response.Status, e.g.
	// "503 Service Unavailable". Optional.
	Status string
	// RetryAfter is the parsed Retry-After header, 0 if absent.
	RetryAfter time.Duration
	// Body is a short excerpt of the response body, to help whoever reads
	// the error understand it. Optional; Error includes at most the first
	// MaxBodyExcerpt bytes of it.
	Body string
}

// MaxBodyExcerpt is how many bytes of a response body FromResponse keeps in
// StatusError.Body, and the most of StatusError.Body that Error includes.
const MaxBodyExcerpt = 512

// Error returns a message such as
// "http status 503 Service Unavailable (retry after 2s): upstream busy".
func (e *StatusError) Error() string {
	if e == nil {
		return "http status <nil>"
	}
	var b strings.Builder
	b.WriteString("http status ")
	switch {
	case e.Status != "":
		b.WriteString(e.Status)
	default:
		b.WriteString(strconv.Itoa(e.Code))
		if t := http.StatusText(e.Code); t != "" {
			b.WriteByte(' ')
			b.WriteString(t)
		}
	}
	if e.RetryAfter > 0 {
		b.WriteString(" (retry after ")
		b.WriteString(e.RetryAfter.String())
		b.WriteByte(')')
	}
	if body := excerpt(e.Body); body != "" {
		b.WriteString(": ")
		b.WriteString(body)
	}
	return b.String()
}

// FromResponse returns a *StatusError describing resp when its status code
// is 400 or more, and nil otherwise, so a handler can write
//
//	if err := failure.FromResponse(resp); err != nil {
//		return err
//	}
//
// It parses the Retry-After header relative to the current time and keeps
// the first MaxBodyExcerpt bytes of the body in StatusError.Body (reading
// one byte more to tell whether it cut the body short); it does
// not close the body, which stays the caller's to close. A nil resp gives a
// non-nil error (classified Unknown), never a silent success.
func FromResponse(resp *http.Response) error {
	if resp == nil {
		return errors.New("failure: FromResponse called with a nil *http.Response")
	}
	if resp.StatusCode < 400 {
		return nil
	}
	e := &StatusError{Code: resp.StatusCode, Status: resp.Status}
	if v := resp.Header.Get("Retry-After"); v != "" {
		e.RetryAfter, _ = ParseRetryAfter(v, time.Now())
	}
	if resp.Body != nil {
		// One byte more than kept, to know whether the excerpt is cut.
		buf := make([]byte, MaxBodyExcerpt+1)
		n, _ := io.ReadFull(resp.Body, buf)
		e.Body = excerpt(string(buf[:n]))
	}
	return e
}

// excerpt bounds s to MaxBodyExcerpt bytes without splitting a UTF-8
// sequence, and trims surrounding white space.
func excerpt(s string) string {
	if len(s) > MaxBodyExcerpt {
		cut := MaxBodyExcerpt
		for cut > 0 && cut > MaxBodyExcerpt-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.TrimSpace(s)
}
