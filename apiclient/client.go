// Package apiclient is a Go client of redrive's REST API (the server
// package, as `redrive serve` runs it): enqueue, read, list, count and
// cancel jobs; browse, group, count, redrive, purge and export the
// dead-letter queue; start, follow, pause, resume and cancel bulk
// operations; pause and resume queues and periodic schedules; force
// circuit breakers open or closed; and read statistics, workers and the
// broker topologies serve manages.
//
// Every call takes a context first. An answer other than 2xx is returned
// as an *Error carrying the API's status, code, message and field:
//
//	_, err := c.Job(ctx, 42)
//	if e, ok := errors.AsType[*apiclient.Error](err); ok && e.StatusCode == http.StatusNotFound {
//		// no job 42
//	}
//
// The package imports neither the server nor any store or broker client:
// a program that only talks to a server stays small.
package apiclient

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
)

// Defaults of the client.
const (
	// DefaultTimeout bounds each request (its answer read in full) unless
	// WithTimeout says otherwise. Streams (ExportDead) and the whole of
	// Follow are bounded by their context only.
	DefaultTimeout = time.Minute
	// DefaultPollInterval is how often Follow reads an operation's state.
	DefaultPollInterval = 200 * time.Millisecond
	// maxAnswer bounds a 2xx answer read into memory.
	maxAnswer = 256 << 20
	// maxErrorBody bounds the body of an error answer read.
	maxErrorBody = 1 << 20
)

// Client calls one redrive server's REST API. It is safe for concurrent
// use.
type Client struct {
	base    *url.URL
	token   string
	hc      *http.Client
	timeout time.Duration
	poll    time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the bearer token of every request to the
// server's origin (serve --token, REDRIVE_TOKEN); a redirect elsewhere
// (another host or port, or https to http) goes without it.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends the requests with hc instead of a client of
// http.DefaultTransport (for TLS settings, a proxy or tracing). Its own
// Timeout, if any, applies as well as WithTimeout's. With WithToken, the
// client uses a copy of hc whose Transport adds the token in front of
// hc's.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithTimeout bounds each request, from sending it to reading its answer
// (default DefaultTimeout); 0 or less: only the context bounds it.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithPollInterval sets how often Follow reads an operation's state
// (default DefaultPollInterval).
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.poll = d
		}
	}
}

// New returns a client of the server at baseURL, an http or https URL
// such as http://127.0.0.1:8080 (a path, if any, prefixes every route).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("apiclient: the server must be an http or https URL such as http://127.0.0.1:8080, got %q", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	if u.Path == "" {
		u.Path = "/" // so that the routes joined to it start with a slash
	}
	c := &Client{base: u, hc: &http.Client{}, timeout: DefaultTimeout, poll: DefaultPollInterval}
	for _, o := range opts {
		o(c)
	}
	if c.token != "" {
		// The token goes in the transport, to the server's origin only:
		// as a header of the request, http.Client would keep it on a
		// redirect to another port of the same host, or to plain http.
		hc := *c.hc
		next := hc.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		hc.Transport = &tokenTransport{next: next, token: c.token, scheme: u.Scheme, host: u.Host}
		c.hc = &hc
	}
	return c, nil
}

// tokenTransport adds the bearer token to the requests to one origin
// (scheme and host:port), and to no other.
type tokenTransport struct {
	next         http.RoundTripper
	token        string
	scheme, host string
}

// RoundTrip sends req, with the token when it goes to the origin.
func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.EqualFold(req.URL.Scheme, t.scheme) || !strings.EqualFold(req.URL.Host, t.host) {
		return t.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// BaseURL returns the server's URL the client was made with.
func (c *Client) BaseURL() string { return c.base.String() }

// Error is an answer of the API other than 2xx. Code is the API's error
// code (not_found, invalid, conflict, unauthorized, ...), Field the input
// at fault when the API names one ("filter.since", "jobs[3].kind").
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code, Message and Field are the API's error body.
	Code    string
	Message string
	Field   string
	// RetryAfter is the wait the server asked for (Retry-After, in
	// seconds or as an HTTP date), 0 when it asked none.
	RetryAfter time.Duration
	// Method and Path are the request's.
	Method string
	Path   string
}

// Error words the error as "server: MESSAGE (HTTP STATUS CODE, field
// FIELD)".
func (e *Error) Error() string {
	s := fmt.Sprintf("server: %s (HTTP %d %s", e.Message, e.StatusCode, e.Code)
	if e.Field != "" {
		s += ", field " + e.Field
	}
	return s + ")"
}

// parseError reads an error answer: the API's JSON error body, or,
// from anything else in front of the API (a proxy), a code made of the
// status text and a message quoting the start of the body.
func parseError(method, path string, status int, h http.Header, body []byte) *Error {
	e := &Error{StatusCode: status, Method: method, Path: path}
	e.RetryAfter = retryAfter(h.Get("Retry-After"), time.Now())
	var eb struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	if code == "" {
		code = "http_" + strconv.Itoa(status)
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Message != "" {
		e.Code, e.Message, e.Field = eb.Error.Code, eb.Error.Message, eb.Error.Field
		if e.Code == "" {
			e.Code = code
		}
		return e
	}
	snippet := strings.ToValidUTF8(strings.TrimSpace(string(body)), "\uFFFD")
	if len(snippet) > 200 {
		snippet = strings.ToValidUTF8(snippet[:200], "") + "..."
	}
	e.Code = code
	e.Message = fmt.Sprintf("%s %s answered %q", method, path, snippet)
	return e
}

// maxRetryAfter bounds a Retry-After taken in.
const maxRetryAfter = 1 << 20 * time.Second

// retryAfter reads a Retry-After header (RFC 9110): delay-seconds, or an
// HTTP date, the wait until it from now. It is 0 when v is absent,
// malformed, not in the future, or past maxRetryAfter.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if d := time.Duration(s) * time.Second; s > 0 && d < maxRetryAfter {
			return d
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 && d < maxRetryAfter {
			return d
		}
	}
	return 0
}

// request is one call of the API.
type request struct {
	method string
	path   string
	query  url.Values
	body   any
	accept string
}

// send sends r and returns a 2xx answer, whose body the caller closes;
// any other status is returned as an *Error. It applies no timeout.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base.JoinPath(r.path)
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var rd io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("apiclient: encode the body of %s %s: %w", r.method, r.path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("apiclient: %w", err)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return nil, fmt.Errorf("server: read the answer to %s %s: %w", r.method, u.Path, err)
	}
	return nil, parseError(r.method, u.Path, resp.StatusCode, resp.Header, data)
}

// do sends r within the client's timeout and decodes a 2xx answer into
// out (nil: the answer is read and dropped).
func (c *Client) do(ctx context.Context, r request, out any) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("server: read the answer to %s %s: %w", r.method, r.path, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("server: malformed answer to %s %s: %w", r.method, r.path, err)
	}
	return nil
}

// get is do for a GET.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, request{method: http.MethodGet, path: path, query: q}, out)
}

// post is do for a POST of body (nil: none).
func (c *Client) post(ctx context.Context, path string, body, out any) error {
	return c.do(ctx, request{method: http.MethodPost, path: path, body: body}, out)
}

// segment escapes a name as one path segment; a name of dots only is
// escaped whole, so that "." or ".." stays a name instead of moving up
// the path.
func segment(name string) string {
	e := url.PathEscape(name)
	if strings.Trim(e, ".") == "" {
		e = strings.Repeat("%2E", len(e))
	}
	return e
}

// IsNotFound reports whether err is an *Error with status 404.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// statusOf returns the status of an *Error in err's chain, 0 if none.
func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
