package rhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
)

// MaxDrain is the most bytes of a discarded response body that Transport
// reads before closing it. Reading a short body to its end lets the
// connection be reused; a longer body is cut short and its connection closed.
const MaxDrain = 64 << 10

// Transport is an http.RoundTripper that retries failed requests by a
// retry.Policy, classifies responses and errors with the failure package,
// honours Retry-After within the policy's MaxRetryAfter clamp, and consults
// a circuit breaker per host. See the package documentation for the rules.
//
// The zero Transport is ready to use: it sends through
// http.DefaultTransport with retry.DefaultPolicy and no breakers. A
// Transport is safe for concurrent use as long as its fields are not
// changed once it is in use (and Rand, if set, is itself safe for
// concurrent use).
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Policy decides whether and after what delay a failed attempt is
	// retried. Nil means retry.DefaultPolicy(): 3 retries after about 1s,
	// 2s and 4s. The policy is used as is; check one built from
	// configuration with its Validate method.
	Policy *retry.Policy

	// Classifier classifies transport errors and error statuses. Nil means
	// the default classification of the failure package.
	Classifier *failure.Classifier

	// Breakers, when set, holds one circuit breaker per request host,
	// named by BreakerName. Nil means no breakers.
	Breakers *breaker.Registry

	// BreakerName returns the name of the breaker a request goes through.
	// Nil means the request's host and port, as in "api.example.com:443"
	// (the port taken from the scheme when the URL has none), so that all
	// requests to one host share a breaker. Set it to group hosts, or to
	// name the dependency ("payments") whatever host serves it. It is only
	// used when Breakers is set.
	BreakerName func(req *http.Request) string

	// Logger receives one Info line per retry, and a line when a retry the
	// policy wanted is not made. Nil means slog.Default().
	Logger *slog.Logger

	// Rand supplies the randomness of the policy's jitter. Nil means the
	// global math/rand/v2 source. It must be safe for concurrent use if the
	// Transport is (a *rand.Rand is not).
	Rand retry.Source

	// Sleep waits d before a retry, returning early with ctx's error when
	// ctx is done; a non-nil error stops the retries and is returned to the
	// caller. Nil means a timer. Tests inject a fake one.
	Sleep func(ctx context.Context, d time.Duration) error

	// OnRetry, if set, is called before each retry's sleep, after the retry
	// was logged, typically to count retries in metrics. It runs on the
	// caller's goroutine and must not modify the request.
	OnRetry func(RetryInfo)
}

// RetryInfo describes a failed attempt that is about to be retried. It is
// what Transport.OnRetry receives.
type RetryInfo struct {
	// Attempt is the 1-based number of the attempt that failed; 1 is the
	// original request. Attempt+1 is sent after Delay.
	Attempt int
	// Delay is how long the Transport waits before the next attempt.
	Delay time.Duration
	// DelayReason says where Delay comes from: retry.ReasonBackoff (the
	// policy's backoff) or retry.ReasonRetryAfter (the server's
	// Retry-After, clamped to the policy's MaxRetryAfter, plus the
	// policy's Retry-After jitter).
	DelayReason string
	// RetryAfter is the delay the server asked for, before clamping; 0
	// when it asked for none.
	RetryAfter time.Duration
	// Class is the failure class of the attempt.
	Class failure.Class
	// Reason is the classifier's reason for Class, such as "http_503" or
	// "connection_refused" (see failure.Verdict).
	Reason string
	// StatusCode is the response's status code, or 0 when the attempt
	// failed with a transport error.
	StatusCode int
	// Err is the failure: a *failure.StatusError (with an excerpt of the
	// discarded body) for an error status, else the transport error.
	Err error
	// Request is the caller's request. Do not modify it.
	Request *http.Request
}

// Error is the error RoundTrip returns when it gives up without a response
// to return: on a transport error, when the caller's context ended during a
// backoff sleep, when a circuit breaker refused the request, or when a fresh
// request body could not be obtained. It wraps the cause.
type Error struct {
	// Attempts is the number of attempts actually sent; 0 when a breaker
	// refused the first one.
	Attempts int
	// Err is the cause. When a later attempt could not be made (the
	// context ended, the breaker refused it), Err wraps both that cause and
	// the previous attempt's failure.
	Err error
}

// Error returns a message such as
// "rhttp: gave up after 4 attempts: dial tcp 127.0.0.1:9: connect: connection refused".
func (e *Error) Error() string {
	if e.Err == nil {
		return "rhttp: gave up after " + strconv.Itoa(e.Attempts) + " attempts"
	}
	if e.Attempts == 0 {
		return "rhttp: request not sent: " + e.Err.Error()
	}
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	return "rhttp: gave up after " + strconv.Itoa(e.Attempts) + " attempt" + s + ": " + e.Err.Error()
}

// Unwrap returns the cause, so that errors.Is and errors.As see through an
// *Error.
func (e *Error) Unwrap() error { return e.Err }

// NewClient returns an http.Client that sends its requests through t. A nil
// t means a zero Transport. The client has no Timeout of its own; give
// requests a context with a deadline, which also bounds the retries.
func NewClient(t *Transport) *http.Client {
	if t == nil {
		t = &Transport{}
	}
	return &http.Client{Transport: t}
}

// CloseIdleConnections closes the idle connections of the Base transport,
// if it has such a method, so that http.Client.CloseIdleConnections works
// through a Transport.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.base().(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, retrying it as the policy allows. It returns the
// first response with a status below 400, or the last response when it
// gives up on an error status (with a nil error), or an *Error when it gives
// up without a response. It never modifies req; retries are sent as clones
// of req with a fresh body from req.GetBody.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &Error{Err: errNoURL}
	}
	ctx := req.Context()
	base := t.base()
	policy := t.Policy
	if policy == nil {
		p := retry.DefaultPolicy()
		policy = &p
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	replayable := !hasBody || req.GetBody != nil

	var br *breaker.Breaker
	if t.Breakers != nil {
		br = t.Breakers.Get(t.breakerName(req))
	}

	var (
		prevDelay time.Duration
		prevFail  error // the previous attempt's failure, once retrying
		redacted  string
	)
	for attempt := 1; ; attempt++ {
		out := req
		if attempt > 1 {
			out = req.Clone(ctx)
			if hasBody {
				body, err := req.GetBody()
				if err != nil {
					return nil, &Error{Attempts: attempt - 1, Err: fmt.Errorf("getting the request body again: %w (previous attempt: %w)", err, prevFail)}
				}
				out.Body = body
			}
		}

		var tok breaker.Token
		if br != nil {
			var err error
			if tok, err = br.Allow(); err != nil {
				// A RoundTripper closes the body it was given, sent or not.
				if out.Body != nil {
					out.Body.Close()
				}
				if prevFail != nil {
					err = fmt.Errorf("%w (previous attempt: %w)", err, prevFail)
				}
				return nil, &Error{Attempts: attempt - 1, Err: err}
			}
		}

		resp, err := base.RoundTrip(out)
		if resp == nil && err == nil {
			err = errNoResponse
		} else if resp != nil && err != nil {
			// Also a broken contract; the error wins, as in net/http.
			drainAndClose(resp.Body)
			resp = nil
		}

		// Classify the outcome; return at once on success.
		var (
			fail   error
			status *failure.StatusError
		)
		switch {
		case err != nil:
			if br != nil {
				if errors.Is(ctx.Err(), context.Canceled) {
					br.Record(tok, context.Canceled) // the caller gave up: neutral
				} else {
					br.Record(tok, err)
				}
			}
			if ctx.Err() != nil {
				return nil, &Error{Attempts: attempt, Err: err}
			}
			fail = err
		case resp.StatusCode >= 400:
			status = &failure.StatusError{Code: resp.StatusCode, Status: resp.Status}
			if v := resp.Header.Get("Retry-After"); v != "" {
				status.RetryAfter, _ = failure.ParseRetryAfter(v, time.Now())
			}
			if br != nil {
				if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
					br.Record(tok, t.breakerErr(status))
				} else {
					br.Record(tok, nil) // the host answered: it is up
				}
			}
			if ctx.Err() != nil {
				return resp, nil
			}
			fail = status
		default:
			if br != nil {
				br.Record(tok, nil)
			}
			return resp, nil
		}

		v := t.Classifier.Classify(fail)
		d := policy.Decide(retry.Input{
			Class:      v.Class,
			Attempt:    attempt,
			RetryAfter: v.RetryAfter,
			PrevDelay:  prevDelay,
		}, t.Rand)

		// giveUp returns the last result: the response untouched, or the
		// error wrapped.
		giveUp := func(why string, level slog.Level) (*http.Response, error) {
			if logger := t.logger(); logger.Enabled(ctx, level) {
				if redacted == "" {
					redacted = redactURL(req.URL)
				}
				attrs := t.attrs(req, redacted, attempt, policy, v, resp, fail)
				attrs = append(attrs, slog.String("why", why))
				if d.Retry {
					attrs = append(attrs, slog.Duration("delay", d.Delay))
				}
				logger.LogAttrs(ctx, level, "rhttp: not retrying request", attrs...)
			}
			if resp != nil {
				return resp, nil
			}
			return nil, &Error{Attempts: attempt, Err: err}
		}

		if !d.Retry {
			return giveUp(d.Reason, slog.LevelDebug)
		}
		if !replayable {
			return giveUp("request body cannot be replayed (no GetBody)", slog.LevelInfo)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.Delay {
			return giveUp("retry delay ends after the context deadline", slog.LevelInfo)
		}
		if br != nil && br.State() == breaker.Open && br.ReadyAt().After(time.Now().Add(d.Delay)) {
			return giveUp("circuit breaker "+strconv.Quote(br.Name())+" is open", slog.LevelInfo)
		}

		// Committed to retrying: the response is discarded.
		if resp != nil {
			if se, ok := failure.FromResponse(resp).(*failure.StatusError); ok {
				status.Body = se.Body
			}
			drainAndClose(resp.Body)
		}

		if logger := t.logger(); logger.Enabled(ctx, slog.LevelInfo) {
			if redacted == "" {
				redacted = redactURL(req.URL)
			}
			attrs := t.attrs(req, redacted, attempt, policy, v, resp, fail)
			attrs = append(attrs,
				slog.Duration("delay", d.Delay),
				slog.String("delay_reason", d.Reason),
			)
			if v.RetryAfter > 0 {
				attrs = append(attrs, slog.Duration("retry_after", v.RetryAfter))
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "rhttp: retrying request", attrs...)
		}
		if t.OnRetry != nil {
			info := RetryInfo{
				Attempt:     attempt,
				Delay:       d.Delay,
				DelayReason: d.Reason,
				RetryAfter:  v.RetryAfter,
				Class:       v.Class,
				Reason:      v.Reason,
				Err:         fail,
				Request:     req,
			}
			if resp != nil {
				info.StatusCode = resp.StatusCode
			}
			t.OnRetry(info)
		}

		sleep := t.Sleep
		if sleep == nil {
			sleep = sleepCtx
		}
		if err := sleep(ctx, d.Delay); err != nil {
			return nil, &Error{Attempts: attempt, Err: fmt.Errorf("%w while waiting to retry (attempt %d: %w)", err, attempt, fail)}
		}
		if err := ctx.Err(); err != nil {
			return nil, &Error{Attempts: attempt, Err: fmt.Errorf("%w before retrying (attempt %d: %w)", err, attempt, fail)}
		}
		prevDelay = d.Delay
		prevFail = fail
	}
}

// attrs returns the log attributes common to every line about a failed
// attempt.
func (t *Transport) attrs(req *http.Request, redacted string, attempt int, p *retry.Policy, v failure.Verdict, resp *http.Response, fail error) []slog.Attr {
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("method", req.Method),
		slog.String("url", redacted),
		slog.Int("attempt", attempt),
		slog.Int("max_attempts", p.MaxRetries+1),
		slog.String("class", v.Class.String()),
		slog.String("reason", v.Reason),
	)
	if resp != nil {
		attrs = append(attrs, slog.Int("status", resp.StatusCode))
	}
	attrs = append(attrs, slog.String("error", fail.Error()))
	return attrs
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

func (t *Transport) breakerName(req *http.Request) string {
	if t.BreakerName != nil {
		return t.BreakerName(req)
	}
	return HostKey(req.URL)
}

// HostKey returns the name Transport gives the breaker of u's host when
// BreakerName is nil: the lower-cased host and the port, as in
// "api.example.com:443". A URL without a port gets its scheme's default (80
// for http, 443 for https); a URL whose scheme has no known default keeps
// its host as is.
func HostKey(u *url.URL) string {
	if u.Port() != "" && !hasUpper(u.Host) {
		return u.Host // already in canonical form: no allocation
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http", "ws":
			port = "80"
		case "https", "wss":
			port = "443"
		default:
			return strings.ToLower(u.Host)
		}
	}
	return net.JoinHostPort(host, port)
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// redactURL returns u without user information, query or fragment, fit for
// logs.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.ForceQuery = false
	c.Fragment = ""
	c.RawFragment = ""
	return c.String()
}

// drainAndClose reads what is left of a discarded body, up to MaxDrain, so
// that its connection can be reused, and closes it.
func drainAndClose(body io.ReadCloser) {
	if body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, MaxDrain)
	_ = body.Close()
}

// sleepCtx waits d, or until ctx is done, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

var _ http.RoundTripper = (*Transport)(nil)

// errNoURL is the cause RoundTrip reports for a request without a URL.
var errNoURL = errors.New("request has no URL")

// errNoResponse guards against a Base that breaks the RoundTripper contract.
var errNoResponse = errors.New("rhttp: base RoundTripper returned neither a response nor an error")

// breakerErr is the error recorded on a host's breaker for an error status:
// status itself, unless the Classifier and the breaker's default rate-limit
// rule disagree on whether it is a rate-limited answer; then it is marked the
// Classifier's way, so that a status override (429 as Transient, or a 5xx as
// RateLimited) decides for the breaker too.
func (t *Transport) breakerErr(status *failure.StatusError) error {
	v := t.Classifier.Classify(status)
	limited := v.Class == failure.RateLimited
	if limited == breaker.DefaultIsRateLimited(status) {
		return status
	}
	if limited {
		return breaker.MarkRateLimited(status)
	}
	return failure.Wrap(v.Class, status)
}
