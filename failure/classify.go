package failure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Verdict is the result of classifying an error.
type Verdict struct {
	// Class is the failure class.
	Class Class
	// RetryAfter is the delay the server asked for, taken from an explicit
	// RateLimited wrapper or from a *StatusError. It is non-zero only when
	// Class is RateLimited, and always within [0, MaxRetryAfter].
	RetryAfter time.Duration
	// Reason is a short machine-readable cause: one of the Reason
	// constants, "http_<code>" (see ReasonHTTPPrefix), or "rule:<pattern>"
	// (see ReasonRulePrefix). It is suitable as a metric label as long as
	// the configured rules are few.
	Reason string
}

// Reasons reported in Verdict.Reason.
const (
	// ReasonNone is the reason given for a nil error.
	ReasonNone = "none"
	// ReasonExplicit means the chain holds an *Error, as returned by Wrap
	// and WrapRateLimited.
	ReasonExplicit = "explicit"
	// ReasonHTTPPrefix prefixes the status code of a *StatusError, as in
	// "http_503".
	ReasonHTTPPrefix = "http_"
	// ReasonDeadlineExceeded is context.DeadlineExceeded, typically the
	// job's own timeout (Transient).
	ReasonDeadlineExceeded = "deadline_exceeded"
	// ReasonCanceled is context.Canceled (Transient: the work was
	// interrupted, not refused).
	ReasonCanceled = "canceled"
	// ReasonTimeout is any error whose Timeout method reports true, such
	// as an http.Client timeout or an expired connection deadline
	// (Transient).
	ReasonTimeout = "timeout"
	// ReasonConnectionRefused is ECONNREFUSED (Transient).
	ReasonConnectionRefused = "connection_refused"
	// ReasonConnectionReset is ECONNRESET, EPIPE, ECONNABORTED or
	// io.ErrUnexpectedEOF: the connection broke mid-exchange (Transient).
	ReasonConnectionReset = "connection_reset"
	// ReasonDNS is a *net.DNSError (Transient).
	ReasonDNS = "dns"
	// ReasonTLS is a certificate or TLS handshake error, a TLS alert, or
	// an https URL served by plain HTTP (Permanent).
	ReasonTLS = "tls"
	// ReasonInvalidURL is a URL that cannot be parsed or used (Permanent).
	ReasonInvalidURL = "invalid_url"
	// ReasonUndecodablePayload is a JSON syntax or type error (Permanent).
	ReasonUndecodablePayload = "undecodable_payload"
	// ReasonRulePrefix prefixes the pattern of the matching Rule, as in
	// "rule:timeout".
	ReasonRulePrefix = "rule:"
	// ReasonUnknown means nothing recognised the error.
	ReasonUnknown = "unknown"
)

// StatusClass returns the default class of an HTTP status code:
//
//	408, 500, 502, 503, 504      Transient
//	429                          RateLimited
//	400, 404, 410, 422, 451, 501 Permanent
//	401, 403                     NeedsAuth
//	other 5xx                    Transient
//	other 4xx                    Permanent
//	anything else                Unknown
//
// A 503 carrying a Retry-After is RateLimited, but that depends on the
// response, not the code: Classify applies it to a *StatusError.
func StatusClass(code int) Class {
	switch code {
	case 408, 500, 502, 503, 504:
		return Transient
	case 429:
		return RateLimited
	case 400, 404, 410, 422, 451, 501:
		return Permanent
	case 401, 403:
		return NeedsAuth
	}
	switch {
	case code >= 500 && code <= 599:
		return Transient
	case code >= 400 && code <= 499:
		return Permanent
	}
	return Unknown
}

// Classify classifies err with the default classifier: no rules and no
// status overrides. See Classifier.Classify.
func Classify(err error) Verdict {
	return (*Classifier)(nil).Classify(err)
}

// Classify classifies err. The first of these that applies decides:
//
//  1. An explicit *Error (from Wrap or WrapRateLimited) anywhere in the
//     chain. If there are several, the one errors.As would find wins: the
//     outermost on a plain chain, the earliest branch of an errors.Join.
//     A RateLimited wrapper with no delay of its own takes the RetryAfter
//     of a *StatusError it wraps.
//  2. A *StatusError, classified by the configured status overrides, else
//     by StatusClass; a 503 with a positive RetryAfter is RateLimited
//     unless 503 is overridden. A status whose class is Unknown (1xx-3xx)
//     does not decide; it lends its "http_<code>" reason if nothing later
//     does.
//  3. Go and network error types: context.DeadlineExceeded and
//     context.Canceled, TLS and certificate errors (including an https
//     URL answered by a plain HTTP server), invalid URLs, JSON decoding
//     errors, *net.DNSError, refused and reset connections, and timeouts,
//     in that priority order when a chain holds several. A wrapper such as
//     *url.Error does not hide what it wraps: a *url.Error around a
//     certificate error is "tls", around a client timeout "timeout".
//  4. The configured rules, tried in order against err.Error().
//  5. Otherwise Unknown.
//
// A nil err gives Verdict{Class: Unknown, Reason: ReasonNone}. Typed-nil
// pointers inside the chain are skipped. Classify never panics: an error
// in the chain whose Unwrap, As, Timeout or Error method panics is treated
// as telling nothing. A nil *Classifier behaves like the default
// classifier.
func (c *Classifier) Classify(err error) (v Verdict) {
	if err == nil {
		return Verdict{Class: Unknown, Reason: ReasonNone}
	}
	defer func() {
		if recover() != nil {
			v = Verdict{Class: Unknown, Reason: ReasonUnknown}
		}
	}()

	var w walker
	w.walk(err, nil, 0)

	// 1. Explicit wrappers.
	if e := w.explicit; e != nil {
		v = Verdict{Class: e.Class, Reason: ReasonExplicit}
		if e.Reason != "" {
			v.Reason = e.Reason
		}
		if v.Class == None || v.Class > NeedsAuth {
			v.Class = Unknown
		}
		if v.Class == RateLimited {
			v.RetryAfter = clampRetryAfter(e.RetryAfter)
			if v.RetryAfter == 0 && e.Err != nil {
				// The wrapper gave no delay; the response it wraps may have.
				var inner walker
				inner.walk(e.Err, nil, 0)
				if inner.status != nil {
					v.RetryAfter = clampRetryAfter(inner.status.RetryAfter)
				}
			}
		}
		return v
	}

	// 2. HTTP status.
	if s := w.status; s != nil {
		class, overridden := c.statusClass(s.Code)
		if !overridden && s.Code == 503 && s.RetryAfter > 0 {
			class = RateLimited
		}
		if class != Unknown {
			v = Verdict{Class: class, Reason: httpReason(s.Code)}
			if class == RateLimited {
				v.RetryAfter = clampRetryAfter(s.RetryAfter)
			}
			return v
		}
	}

	// 3. Go and network error types.
	if w.found != 0 {
		for _, k := range kindOrder {
			if w.found&(1<<k) != 0 {
				return Verdict{Class: kindClass[k], Reason: kindReason[k]}
			}
		}
	}

	// 4. Configured rules.
	if c != nil && len(c.rules) > 0 {
		if msg, ok := safeMessage(err); ok {
			if r := c.match(msg); r != nil {
				return Verdict{Class: r.class, Reason: r.reason}
			}
		}
	}

	// 5. Unknown.
	if s := w.status; s != nil {
		return Verdict{Class: Unknown, Reason: httpReason(s.Code)}
	}
	return Verdict{Class: Unknown, Reason: ReasonUnknown}
}

// kind is a Go or network error category, stage 3 of Classify.
type kind uint8

const (
	kindDeadline kind = iota
	kindCanceled
	kindTLS
	kindInvalidURL
	kindJSON
	kindDNS
	kindRefused
	kindReset
	kindTimeout
	numKinds
)

// kindOrder is the priority among kinds when a chain holds several. The
// specific kinds come before kindTimeout because wrappers such as
// *url.Error and *net.OpError report the Timeout of whatever they wrap.
var kindOrder = [numKinds]kind{
	kindDeadline, kindCanceled, kindTLS, kindInvalidURL, kindJSON,
	kindDNS, kindRefused, kindReset, kindTimeout,
}

var kindClass = [numKinds]Class{
	kindDeadline:   Transient,
	kindCanceled:   Transient,
	kindTLS:        Permanent,
	kindInvalidURL: Permanent,
	kindJSON:       Permanent,
	kindDNS:        Transient,
	kindRefused:    Transient,
	kindReset:      Transient,
	kindTimeout:    Transient,
}

var kindReason = [numKinds]string{
	kindDeadline:   ReasonDeadlineExceeded,
	kindCanceled:   ReasonCanceled,
	kindTLS:        ReasonTLS,
	kindInvalidURL: ReasonInvalidURL,
	kindJSON:       ReasonUndecodablePayload,
	kindDNS:        ReasonDNS,
	kindRefused:    ReasonConnectionRefused,
	kindReset:      ReasonConnectionReset,
	kindTimeout:    ReasonTimeout,
}

// maxDepth and maxNodes bound how much of an error tree one classification
// examines, so that a pathological chain (cyclic, or absurdly deep or wide)
// cannot hang the caller. Cycles through pointers are also cut soon after
// they close.
const (
	maxDepth = 128
	maxNodes = 1 << 14
)

// walker gathers, in one depth-first pre-order traversal of an error tree
// (the order errors.As uses), what each classification stage needs.
type walker struct {
	explicit *Error       // first non-nil *Error
	status   *StatusError // first non-nil *StatusError
	found    uint16       // bit k set when kind k was seen
	visited  int
}

// walk visits err, at the given depth, and its descendants, stopping at the
// first explicit *Error since nothing can outrank it. mark is an ancestor
// of err, re-chosen at every power-of-two depth (Brent's cycle detection):
// meeting it again means the chain loops.
func (w *walker) walk(err, mark error, depth int) {
	if err == nil || w.explicit != nil || w.visited >= maxNodes || depth >= maxDepth {
		return
	}
	w.visited++
	if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer {
		// err's dynamic type is a pointer, so == cannot panic.
		if v.IsNil() || err == mark {
			return
		}
	}
	if w.visit(err) {
		return
	}
	depth++
	if depth&(depth-1) == 0 {
		mark = err
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		w.walk(safeUnwrap(u), mark, depth)
	case interface{ Unwrap() []error }:
		for _, e := range safeUnwrapAll(u) {
			w.walk(e, mark, depth)
			if w.explicit != nil {
				return
			}
		}
	}
}

// visit records what err itself tells and reports whether the walk is
// over. It honours an As method the way errors.As does for the two types
// of this package.
func (w *walker) visit(err error) (stop bool) {
	switch e := err.(type) {
	case *Error:
		w.explicit = e
		return true
	case *StatusError:
		if w.status == nil {
			w.status = e
		}
		return false
	case interface{ As(any) bool }:
		var x *Error
		if safeAs(e, &x) && x != nil {
			w.explicit = x
			return true
		}
		var s *StatusError
		if w.status == nil && safeAs(e, &s) && s != nil {
			w.status = s
		}
	}

	switch err {
	case context.DeadlineExceeded:
		w.mark(kindDeadline)
	case context.Canceled:
		w.mark(kindCanceled)
	case io.ErrUnexpectedEOF:
		w.mark(kindReset)
	}

	switch e := err.(type) {
	case syscall.Errno:
		switch e {
		case syscall.ECONNREFUSED:
			w.mark(kindRefused)
		case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
			w.mark(kindReset)
		}
	case *net.DNSError:
		w.mark(kindDNS)
	case *net.OpError:
		// crypto/tls reports TLS alerts, received or sent, as *net.OpError
		// with these operations around an unexported alert type.
		if e != nil && (e.Op == "remote error" || e.Op == "local error") {
			w.mark(kindTLS)
		}
	case *url.Error:
		if e.Op == "parse" {
			w.mark(kindInvalidURL)
		} else if k, ok := urlCauseKind(e.Err); ok {
			w.mark(k)
		}
	case url.InvalidHostError, url.EscapeError:
		w.mark(kindInvalidURL)
	case *tls.CertificateVerificationError, tls.RecordHeaderError, *tls.RecordHeaderError,
		tls.AlertError, *tls.AlertError, *tls.ECHRejectionError,
		x509.UnknownAuthorityError, *x509.UnknownAuthorityError,
		x509.HostnameError, *x509.HostnameError,
		x509.CertificateInvalidError, *x509.CertificateInvalidError,
		x509.SystemRootsError, *x509.SystemRootsError,
		x509.ConstraintViolationError, *x509.ConstraintViolationError,
		x509.UnhandledCriticalExtension, *x509.UnhandledCriticalExtension,
		x509.InsecureAlgorithmError, *x509.InsecureAlgorithmError:
		w.mark(kindTLS)
	case *json.SyntaxError, *json.UnmarshalTypeError:
		w.mark(kindJSON)
	}

	if t, ok := err.(interface{ Timeout() bool }); ok && w.found&(1<<kindTimeout) == 0 && safeTimeout(t) {
		w.mark(kindTimeout)
	}
	return false
}

func (w *walker) mark(k kind) { w.found |= 1 << k }

// urlCauseKind classifies err, found directly inside a *url.Error, when it
// is net/http refusing a URL it cannot use or reporting a plain-HTTP server
// at an https URL. net/http exposes these only as messages.
func urlCauseKind(err error) (kind, bool) {
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		// Not one of those plain messages; also spares building the
		// message of a whole chain.
		return 0, false
	}
	msg, ok := safeMessage(err)
	if !ok {
		return 0, false
	}
	switch {
	case strings.HasPrefix(msg, "unsupported protocol scheme"),
		strings.HasPrefix(msg, "http: no Host in request URL"):
		return kindInvalidURL, true
	case strings.HasPrefix(msg, "http: server gave HTTP response to HTTPS client"):
		return kindTLS, true
	}
	return 0, false
}

// The safe* helpers call a method of an error from the chain, treating a
// panic as "nothing to learn here" so that one misbehaving error (typically
// a typed nil whose methods do not expect a nil receiver) does not hide the
// rest of the chain.

func safeUnwrap(u interface{ Unwrap() error }) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	return u.Unwrap()
}

func safeUnwrapAll(u interface{ Unwrap() []error }) (errs []error) {
	defer func() {
		if recover() != nil {
			errs = nil
		}
	}()
	return u.Unwrap()
}

func safeAs(e interface{ As(any) bool }, target any) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return e.As(target)
}

func safeTimeout(t interface{ Timeout() bool }) (timeout bool) {
	defer func() {
		if recover() != nil {
			timeout = false
		}
	}()
	return t.Timeout()
}

func safeMessage(err error) (msg string, ok bool) {
	if err == nil || isNilPointer(err) {
		return "", false
	}
	defer func() {
		if recover() != nil {
			msg, ok = "", false
		}
	}()
	return err.Error(), true
}

// isNilPointer reports whether err holds a nil pointer, whose methods
// might not expect a nil receiver.
func isNilPointer(err error) bool {
	v := reflect.ValueOf(err)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// clampRetryAfter bounds d to [0, MaxRetryAfter].
func clampRetryAfter(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}

// httpReasons holds the reasons of the common status codes so that
// classifying them does not allocate.
var httpReasons = func() []string {
	r := make([]string, 600)
	for code := 100; code < len(r); code++ {
		r[code] = ReasonHTTPPrefix + strconv.Itoa(code)
	}
	return r
}()

func httpReason(code int) string {
	if code >= 100 && code < len(httpReasons) {
		return httpReasons[code]
	}
	return ReasonHTTPPrefix + strconv.Itoa(code)
}
