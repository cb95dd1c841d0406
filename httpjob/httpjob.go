// Package httpjob is redrive's built-in "http" job kind: each job performs
// one HTTP request (webhook delivery, download, API call) and its result is
// classified by the failure package's HTTP tables, so that the engine
// retries, honours Retry-After or dead-letters it by policy.
//
// A job's payload is JSON:
//
//	{
//	  "method":  "POST",                        // default GET
//	  "url":     "https://example.com/hook",    // required, http or https
//	  "headers": {"Content-Type": "application/json"},
//	  "body":    "{\"event\":\"paid\"}",        // sent as is
//	  "timeout": "30s"                          // per attempt, default 30s, at most Options.MaxTimeout
//	}
//
// A 2xx response completes the job; its status and an excerpt of its body
// are kept in the job's history (redrive.Record). Any other status fails the attempt
// with a *failure.StatusError holding the status, the parsed Retry-After
// and a bounded excerpt of the body, so the attempt history shows what the
// server said: 5xx and 408 are retried, 429 and 503 with Retry-After are
// retried no sooner than the server asked, 401 and 403 go to the DLQ with
// reason needs_auth, other 4xx go to the DLQ at once. Network errors are
// classified as they are (refused, reset, DNS, timeout: retried; TLS:
// dead). A payload that cannot be used (not JSON, no url, bad method, bad
// timeout) is a permanent failure.
//
// With Options.Breakers set, each request goes through the circuit breaker of
// its dependency: by default one per host (named as rhttp.HostKey names it,
// "api.example.com:443"), or the name Options.Dependency gives its URL. 5xx
// responses, timeouts and network errors count against it; any other answer
// shows the host is up; a rate-limited answer (429, 503 with Retry-After) is
// neutral unless the breaker counts it. While the breaker is open the
// request is not sent and the job is deferred, without using an attempt,
// until the breaker lets a probe through. A job that names its own
// Dependency is guarded by that breaker, in the engine, instead.
//
// The handler does not retry by itself: the engine retries jobs. It refuses
// link-local and cloud-metadata addresses (169.254.0.0/16, fe80::/10,
// 169.254.169.254, fd00:ec2::254, metadata.google.internal, ...) unless
// Options.AllowLinkLocal is set, checking the address actually dialed, so a
// host name that resolves to such an address is refused too.
package httpjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/httpreq"
	"github.com/redrivehq/redrive/internal/netguard"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/rhttp"
)

// Kind is the job kind Register handles.
const Kind = "http"

// Defaults and bounds of Options.
const (
	// DefaultTimeout bounds an attempt whose payload sets no timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxTimeout is the largest timeout a payload may ask for.
	DefaultMaxTimeout = 5 * time.Minute
	// DefaultMaxResponseBody is how many bytes of a response are read at
	// most (the rest is discarded unread).
	DefaultMaxResponseBody = 1 << 20
	// MaxHeaders bounds the number of headers of one payload.
	MaxHeaders = 100
	// MaxRedirects bounds the redirects followed by one attempt.
	MaxRedirects = netguard.MaxRedirects
)

// Options configure the http job kind. The zero value is usable: loopback
// and private addresses allowed, link-local and metadata addresses refused.
type Options struct {
	// BlockPrivate refuses loopback (127.0.0.0/8, ::1), private
	// (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10),
	// unspecified (0.0.0.0, ::), reserved (0.0.0.0/8, 240.0.0.0/4),
	// site-local (fec0::/10) and IPv4-translated (::ffff:0:0:0/96)
	// addresses. Off by default so that jobs may
	// call services on the same machine or network; turn it on when the
	// URLs come from people you do not trust.
	BlockPrivate bool
	// AllowLinkLocal allows link-local addresses (169.254.0.0/16,
	// fe80::/10) and the cloud metadata endpoints, which are refused by
	// default: a job must not read a machine's cloud credentials.
	AllowLinkLocal bool
	// DefaultTimeout bounds an attempt whose payload gives no timeout
	// (default DefaultTimeout).
	DefaultTimeout time.Duration
	// MaxTimeout is the largest timeout a payload may ask for (default
	// DefaultMaxTimeout); a larger one is a permanent failure.
	MaxTimeout time.Duration
	// MaxResponseBody bounds how much of a response body is read (default
	// DefaultMaxResponseBody).
	MaxResponseBody int64
	// UserAgent is sent when the payload sets no User-Agent (default
	// "redrive-http/1").
	UserAgent string
	// HandlerOptions are passed to the worker's HandleFunc (a retry policy
	// or a dependency for the kind).
	HandlerOptions []redrive.HandlerOption
	// RedactHeaders are the patterns of the header and query parameter
	// names whose values are secrets (see server.Options.RedactHeaders):
	// an attempt's error and result notes show them as "•••", so that
	// neither the job's history, the DLQ nor the logs keep a secret a
	// server echoed. nil: the defaults; empty: none; an invalid list: the
	// defaults. The request itself is sent with the real values.
	RedactHeaders []string
	// Breakers, when set, holds the circuit breakers requests go through,
	// one per dependency (see the package documentation). Pass the
	// worker's registry (Worker.Breakers) so that the API, the dashboard
	// and the metrics show them. Nil means no breakers.
	Breakers *breaker.Registry
	// Dependency names the breaker of a request to u. Nil, or an empty
	// name, means rhttp.HostKey(u): one breaker per host and port.
	Dependency func(u *url.URL) string
	// AllowLinkLocalSetting and AllowPrivateSetting name, in the refusals
	// of link-local and private addresses, the setting that allows them,
	// as the program's users set it: by default these Options' fields
	// ("httpjob.Options.AllowLinkLocal", "httpjob.Options.BlockPrivate
	// false"); redrive serve names its flags, --http-allow-link-local and
	// --http-allow-private.
	AllowLinkLocalSetting string
	AllowPrivateSetting   string
	// NoTraceParent stops the requests from carrying the attempt's W3C
	// trace context. By default, when the worker traces
	// (redrive.ClientOptions.TracerProvider), each request has a
	// traceparent header (and a tracestate when there is one) naming
	// the attempt's span, so that the target's spans join the job's
	// trace; a payload's own traceparent header is sent instead.
	NoTraceParent bool
}

// Payload is the payload of an http job.
type Payload struct {
	// Method is the HTTP method (default GET).
	Method string `json:"method,omitempty"`
	// URL is the http or https URL to request.
	URL string `json:"url"`
	// Headers are the request headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the request body, sent as is.
	Body string `json:"body,omitempty"`
	// Timeout bounds one attempt: a Go duration such as "30s" or a number
	// of seconds.
	Timeout json.RawMessage `json:"timeout,omitempty"`
}

// Register registers the "http" job kind on w, and its payload check
// (Validate) on w's client: an http job whose payload an attempt would
// refuse is refused at enqueue, naming the field.
func Register(w *redrive.Worker, opts Options) {
	h := New(opts)
	w.HandleFunc(Kind, h.Handle, opts.HandlerOptions...)
	w.Client().SetValidator(Kind, h.Validate)
}

// Handler performs http jobs. Create it with New; Register is the usual
// way to use it.
type Handler struct {
	opts     Options
	redactor *redact.Redactor
	guard    *netguard.Guard
	client   *http.Client
}

// New returns a handler for http jobs with its own connection pool.
func New(opts Options) *Handler {
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.AllowLinkLocalSetting == "" {
		opts.AllowLinkLocalSetting = "httpjob.Options.AllowLinkLocal"
	}
	if opts.AllowPrivateSetting == "" {
		opts.AllowPrivateSetting = "httpjob.Options.BlockPrivate false"
	}
	if opts.DefaultTimeout > opts.MaxTimeout {
		opts.DefaultTimeout = opts.MaxTimeout
	}
	if opts.MaxResponseBody <= 0 {
		opts.MaxResponseBody = DefaultMaxResponseBody
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "redrive-http/1"
	}
	h := &Handler{opts: opts, guard: netguard.New(netguard.Options{Name: "httpjob",
		BlockPrivate: opts.BlockPrivate, AllowLinkLocal: opts.AllowLinkLocal,
		AllowLinkLocalSetting: opts.AllowLinkLocalSetting, AllowPrivateSetting: opts.AllowPrivateSetting})}
	h.client = h.guard.NewClient(nil)
	h.redactor = redact.ForHeaders(opts.RedactHeaders)
	return h
}

// BlockedError is the error of a request to an address the Options refuse.
// The handler reports it as permanent. (It is the guard shared by the
// built-in kinds, internal/netguard.)
type BlockedError = netguard.BlockedError

// Handle performs one attempt of an http job. Its error shows the
// payload's secrets (Options.RedactHeaders) masked.
func (h *Handler) Handle(ctx context.Context, job *redrive.Job) error {
	var secrets []string
	if len(job.Payload) > 0 {
		_, secrets = h.redactor.Payload(Kind, job.Payload)
	}
	return redact.Error(h.handle(ctx, job, secrets), secrets)
}

// handle is Handle; its result notes show secrets masked.
func (h *Handler) handle(ctx context.Context, job *redrive.Job, secrets []string) error {
	req, timeout, err := h.request(ctx, job.Payload)
	if err != nil {
		return redrive.Permanent(fmt.Errorf("httpjob: %w", err))
	}
	// The engine's retry and DLQ log lines name the target (without
	// credentials or query).
	redrive.LogWith(ctx, "url", httpreq.Redact(req.URL), "method", req.Method)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req = req.WithContext(ctx)

	var br *breaker.Breaker
	var tok breaker.Token
	if h.opts.Breakers != nil && job.Dependency == "" {
		br = h.opts.Breakers.Get(h.dependency(req.URL))
		if tok, err = br.Allow(); err != nil {
			return err // *breaker.OpenError: the engine defers the job
		}
	}
	resp, err := h.client.Do(req)
	if br != nil {
		br.Record(tok, breakerOutcome(resp, err))
	}
	if err != nil {
		if be, ok := errors.AsType[*BlockedError](err); ok {
			return redrive.Permanent(be)
		}
		// An attempt that ran out of its own timeout is reported as such
		// (classified transient), rather than as a bare context error.
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("httpjob: %s %s: no response within %s: %w", req.Method, httpreq.Redact(req.URL), timeout, err)
		}
		return err // *url.Error: the failure package classifies what it wraps
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, h.opts.MaxResponseBody))
		resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// The history's "completed" event shows what the server answered.
		buf := make([]byte, failure.MaxBodyExcerpt)
		n, _ := io.ReadFull(resp.Body, buf)
		ok := failure.StatusError{Code: resp.StatusCode, Status: resp.Status, Body: string(buf[:n])}
		redrive.Record(ctx, failure.ReasonHTTPPrefix+strconv.Itoa(resp.StatusCode), redact.Scrub(ok.Error(), secrets))
		return nil
	}
	if err := failure.FromResponse(resp); err != nil {
		return err
	}
	// 1xx or 3xx (a redirect not followed): not a success. The status
	// table has no class for it, so the engine treats it as Unknown.
	buf := make([]byte, failure.MaxBodyExcerpt)
	n, _ := io.ReadFull(resp.Body, buf)
	return &failure.StatusError{Code: resp.StatusCode, Status: resp.Status, Body: string(buf[:n])}
}

// methods are the methods a payload may use.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// request builds the request a payload describes, or says what is wrong
// with the payload.
func (h *Handler) request(ctx context.Context, raw json.RawMessage) (*http.Request, time.Duration, error) {
	bad := func(field, format string, args ...any) (*http.Request, time.Duration, error) {
		return nil, 0, &redrive.FieldError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return bad("payload", "want a JSON object {method, url, headers, body, timeout}: %w", err)
	}
	if dec.More() {
		return bad("payload", "trailing data after the JSON object")
	}
	method := strings.ToUpper(strings.TrimSpace(p.Method))
	if method == "" {
		method = http.MethodGet
	}
	if !methods[method] {
		return bad("payload.method", "method %q: want GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS", p.Method)
	}
	u, err := h.guard.ParseURL(p.URL)
	if err != nil {
		return bad("payload.url", "%w", err)
	}
	timeout, err := h.timeout(p.Timeout)
	if err != nil {
		return nil, 0, &redrive.FieldError{Field: "payload.timeout", Err: err}
	}
	if len(p.Headers) > MaxHeaders {
		return bad("payload.headers", "%d headers, the limit is %d", len(p.Headers), MaxHeaders)
	}
	if field, err := httpreq.Masked(u, p.Headers); err != nil {
		return nil, 0, &redrive.FieldError{Field: field, Err: err}
	}
	var body io.Reader
	if p.Body != "" {
		body = strings.NewReader(p.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return bad("payload", "%w", err)
	}
	for k, v := range p.Headers {
		if !httpreq.ValidHeaderName(k) {
			return bad("payload.headers", "header name %q is not a valid HTTP token", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return bad("payload.headers", "header %q: value holds a line break or NUL", k)
		}
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", h.opts.UserAgent)
	}
	if !h.opts.NoTraceParent {
		tracectx.SetHeader(ctx, req.Header)
	}
	return req, timeout, nil
}

// Validate checks a payload as an attempt would before sending anything:
// a JSON object with an http(s) URL whose literal address the guard
// allows, a known method, valid headers, a timeout in range. Its error is
// a *redrive.FieldError naming the field ("payload.url", ...). Register
// makes the worker's client run it on every enqueue of the kind.
func (h *Handler) Validate(payload json.RawMessage) error {
	_, _, err := h.request(context.Background(), payload)
	return err
}

// timeout parses the payload's timeout (see httpreq.Timeout).
func (h *Handler) timeout(raw json.RawMessage) (time.Duration, error) {
	return httpreq.Timeout(raw, h.opts.DefaultTimeout, h.opts.MaxTimeout, "30s")
}

// dependency names the breaker of a request to u.
func (h *Handler) dependency(u *url.URL) string {
	if h.opts.Dependency != nil {
		if name := h.opts.Dependency(u); name != "" {
			return name
		}
	}
	return rhttp.HostKey(u)
}

// breakerOutcome is what a request's result tells its host's breaker: a
// network error or timeout as is (a request the attempt's cancellation
// stopped is neutral by the breaker's rule), a refusal by the address
// guard as no failure (the host was not called), a 5xx or 429 as its
// status (a failure, or neutral when rate-limited), and any other answer as
// a success.
func breakerOutcome(resp *http.Response, err error) error {
	switch {
	case err != nil:
		if _, blocked := errors.AsType[*BlockedError](err); blocked {
			return breaker.Ignore(err)
		}
		return err
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		se := &failure.StatusError{Code: resp.StatusCode, Status: resp.Status}
		if v := resp.Header.Get("Retry-After"); v != "" {
			se.RetryAfter, _ = failure.ParseRetryAfter(v, time.Now())
		}
		return se
	}
	return nil
}
