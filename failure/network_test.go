package failure

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/closedport"
)

// realError is an error produced by the real standard library, with the
// verdict Classify must give it.
type realError struct {
	name   string
	err    error
	class  Class
	reason string
}

// quietTLSServer starts an httptest TLS server that does not log handshake
// failures (they are the point of the tests).
func quietTLSServer(t *testing.T, cfg *tls.Config, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.TLS = cfg
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// resettingListener accepts connections and closes each at once with
// SO_LINGER 0, so the peer sees a TCP RST.
func resettingListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	return l.Addr().String()
}

func mustErr(t *testing.T, what string, err error) error {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error", what)
	}
	return err
}

func realErrors(t *testing.T) []realError {
	t.Helper()
	var out []realError
	add := func(name string, err error, class Class, reason string) {
		out = append(out, realError{name, mustErr(t, name, err), class, reason})
	}

	// Connection refused: dial a port nobody listens on.
	refusedAddr := closedport.New(t).Addr()
	_, err := net.Dial("tcp", refusedAddr)
	add("dial refused", err, Transient, ReasonConnectionRefused)
	_, err = http.Get("http://" + refusedAddr + "/")
	add("http refused", err, Transient, ReasonConnectionRefused)

	// Connection reset: the server answers the handshake, then sends RST.
	resetAddr := resettingListener(t)
	c, err := net.Dial("tcp", resetAddr)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	} // else the RST beat the end of connect: reset all the same
	add("read reset", err, Transient, ReasonConnectionReset)
	_, err = http.Get("http://" + resetAddr + "/")
	add("http reset", err, Transient, ReasonConnectionReset)

	// Timeouts: an http.Client timeout against a server that never answers
	// in time (it waits for the client to give up, so nothing sleeps), and
	// an expired connection deadline.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	_, err = (&http.Client{Timeout: time.Millisecond}).Get(slow.URL)
	add("http client timeout", err, Transient, ReasonTimeout)
	c, err = net.Dial("tcp", strings.TrimPrefix(slow.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now())
	_, err = c.Read(make([]byte, 1))
	c.Close()
	add("conn deadline", err, Transient, ReasonTimeout)

	// Context deadline and cancellation, bare and through an HTTP request.
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancelPast)
	add("context deadline", past.Err(), Transient, ReasonDeadlineExceeded)
	req, _ := http.NewRequestWithContext(past, "GET", slow.URL, nil)
	_, err = http.DefaultClient.Do(req)
	add("http context deadline", err, Transient, ReasonDeadlineExceeded)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	add("context canceled", canceled.Err(), Transient, ReasonCanceled)
	req, _ = http.NewRequestWithContext(canceled, "GET", slow.URL, nil)
	_, err = http.DefaultClient.Do(req)
	add("http context canceled", err, Transient, ReasonCanceled)

	// TLS: a client that does not trust the test certificate, a wrong
	// server name, a server demanding a client certificate (a TLS alert), a
	// plain-text peer, and https to a plain HTTP server.
	ts := quietTLSServer(t, nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, err = (&http.Client{}).Get(ts.URL)
	add("tls unknown authority", err, Permanent, ReasonTLS)
	tr := ts.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "nothere.invalid"
	_, err = (&http.Client{Transport: tr}).Get(ts.URL)
	tr.CloseIdleConnections()
	add("tls hostname", err, Permanent, ReasonTLS)
	mtls := quietTLSServer(t, &tls.Config{ClientAuth: tls.RequireAnyClientCert},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, err = mtls.Client().Get(mtls.URL)
	add("tls alert", err, Permanent, ReasonTLS)
	client, server := net.Pipe()
	go func() {
		go io.Copy(io.Discard, server)
		server.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	}()
	err = tls.Client(client, &tls.Config{ServerName: "example.com"}).Handshake()
	client.Close()
	server.Close()
	add("tls record header", err, Permanent, ReasonTLS)
	_, err = http.Get("https://" + strings.TrimPrefix(slow.URL, "http://"))
	add("https to http server", err, Permanent, ReasonTLS)

	// Invalid URLs.
	_, err = http.Get("://bad")
	add("missing scheme", err, Permanent, ReasonInvalidURL)
	_, err = http.Get("ftp://example.com/file")
	add("unsupported scheme", err, Permanent, ReasonInvalidURL)
	_, err = http.Get("http:///no-host")
	add("no host", err, Permanent, ReasonInvalidURL)
	//lint:ignore SA1007 the URL is invalid on purpose
	_, err = url.Parse("http://a b.example/")
	add("invalid host", err, Permanent, ReasonInvalidURL)
	//lint:ignore SA1007 the URL is invalid on purpose
	_, err = url.Parse("http://example.com/%zz")
	add("bad escape", err, Permanent, ReasonInvalidURL)

	// DNS: a real lookup is unreliable offline, so build the error the
	// resolver returns, wrapped the way net.Dial wraps it.
	dns := &net.DNSError{Err: "no such host", Name: "nothere.invalid", IsNotFound: true}
	add("dns", dns, Transient, ReasonDNS)
	add("dns dial", &net.OpError{Op: "dial", Net: "tcp", Err: dns}, Transient, ReasonDNS)
	dnsTimeout := &net.DNSError{Err: "i/o timeout", Name: "slow.example", IsTimeout: true}
	add("dns timeout in url.Error", &url.Error{Op: "Get", URL: "http://slow.example/",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: dnsTimeout}}, Transient, ReasonDNS)

	// Undecodable payloads.
	var v struct{ N int }
	add("json syntax", json.Unmarshal([]byte(`{"n":`+"\x01"), &v), Permanent, ReasonUndecodablePayload)
	add("json type", json.Unmarshal([]byte(`{"N":"seven"}`), &v), Permanent, ReasonUndecodablePayload)
	add("json truncated", json.Unmarshal([]byte(`{"N":`), &v), Permanent, ReasonUndecodablePayload)

	// Broken streams.
	_, err = io.ReadFull(strings.NewReader("ab"), make([]byte, 3))
	add("unexpected EOF", err, Transient, ReasonConnectionReset)
	add("epipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)},
		Transient, ReasonConnectionReset)
	add("econnaborted", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNABORTED)},
		Transient, ReasonConnectionReset)
	return out
}

func TestClassifyRealErrors(t *testing.T) {
	for _, re := range realErrors(t) {
		variants := []struct {
			how string
			err error
		}{
			{"bare", re.err},
			{"wrapped", fmt.Errorf("job 42: %w", re.err)},
			{"wrapped twice", fmt.Errorf("attempt 3: %w", fmt.Errorf("fetch: %w", re.err))},
			{"joined last", errors.Join(errors.New("cleanup: file busy"), re.err)},
			{"joined first", errors.Join(re.err, errors.New("cleanup: file busy"))},
			{"joined and wrapped", fmt.Errorf("job: %w", errors.Join(io.EOF, fmt.Errorf("x: %w", re.err)))},
		}
		for _, vr := range variants {
			t.Run(re.name+"/"+vr.how, func(t *testing.T) {
				got := Classify(vr.err)
				want := Verdict{Class: re.class, Reason: re.reason}
				if got != want {
					t.Errorf("Classify(%T %q) = %+v, want %+v", re.err, re.err, got, want)
				}
			})
		}
	}
}

// TestClassifyPriority checks the order among Go/network kinds when one
// chain holds several, and that the explicit and HTTP stages outrank them.
func TestClassifyPriority(t *testing.T) {
	tlsErr := &tls.CertificateVerificationError{Err: errors.New("x509: expired")}
	timeoutErr := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name   string
		err    error
		class  Class
		reason string
	}{
		{"url.Error wrapping timeout", &url.Error{Op: "Get", URL: "http://x", Err: timeoutErr}, Transient, ReasonTimeout},
		{"url.Error wrapping tls", &url.Error{Op: "Get", URL: "https://x", Err: tlsErr}, Permanent, ReasonTLS},
		{"url.Error wrapping deadline", &url.Error{Op: "Get", URL: "http://x", Err: context.DeadlineExceeded}, Transient, ReasonDeadlineExceeded},
		{"tls beats timeout in a join", errors.Join(timeoutErr, tlsErr), Permanent, ReasonTLS},
		{"refused beats timeout in a join", errors.Join(timeoutErr, refused), Transient, ReasonConnectionRefused},
		{"deadline beats tls", errors.Join(tlsErr, context.DeadlineExceeded), Transient, ReasonDeadlineExceeded},
		{"status beats network", errors.Join(tlsErr, &StatusError{Code: 503}), Transient, "http_503"},
		{"explicit beats status", Wrap(Transient, &StatusError{Code: 404}), Transient, ReasonExplicit},
		{"explicit beats network", fmt.Errorf("x: %w", Wrap(NeedsAuth, tlsErr)), NeedsAuth, ReasonExplicit},
		{"unknown status falls through to network", errors.Join(&StatusError{Code: 302}, refused), Transient, ReasonConnectionRefused},
		{"unknown status keeps its reason", &StatusError{Code: 302}, Unknown, "http_302"},
		{"plain error", errors.New("boom"), Unknown, ReasonUnknown},
		{"bare EOF", io.EOF, Unknown, ReasonUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.err)
			if got.Class != tt.class || got.Reason != tt.reason {
				t.Errorf("Classify = %+v, want class %v reason %q", got, tt.class, tt.reason)
			}
		})
	}
}

// panicky is an error whose Unwrap panics.
type panicky struct{}

func (panicky) Error() string { return "panicky" }
func (panicky) Unwrap() error { panic("boom") }

// cyclic is an error that unwraps to itself.
type cyclic struct{}

func (c *cyclic) Error() string { return "cyclic" }
func (c *cyclic) Unwrap() error { return c }

// pingPong is half of a two-error cycle.
type pingPong struct{ other *pingPong }

func (p *pingPong) Error() string { return "ping" }
func (p *pingPong) Unwrap() error { return p.other }

// valueLoop is a non-pointer, non-comparable error that unwraps to itself.
type valueLoop struct{ s []int }

func (v valueLoop) Error() string { return fmt.Sprint("loop ", len(v.s)) }
func (v valueLoop) Unwrap() error { return v }

// asStatus exposes a StatusError through an As method only.
type asStatus struct{ code int }

func (a asStatus) Error() string { return "as status" }
func (a asStatus) As(target any) bool {
	if p, ok := target.(**StatusError); ok {
		*p = &StatusError{Code: a.code}
		return true
	}
	return false
}

// asExplicit exposes an explicit *Error through an As method only.
type asExplicit struct{}

func (asExplicit) Error() string { return "as explicit" }
func (asExplicit) As(target any) bool {
	if p, ok := target.(**Error); ok {
		*p = &Error{Class: Permanent}
		return true
	}
	return false
}

func TestClassifyRobustness(t *testing.T) {
	var nilStatus *StatusError
	var nilExplicit *Error
	var nilURL *url.Error
	var nilOp *net.OpError
	ping, pong := &pingPong{}, &pingPong{}
	ping.other, pong.other = pong, ping
	deep := Wrap(NeedsAuth, nil)
	for range maxDepth - 1 { // the explicit error at the deepest depth examined
		deep = fmt.Errorf("layer: %w", deep)
	}
	tests := []struct {
		name string
		err  error
		want Verdict
	}{
		{"nil", nil, Verdict{Class: Unknown, Reason: ReasonNone}},
		{"two-error cycle", ping, Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"cycle, then explicit", errors.Join(ping, &cyclic{}, Wrap(Transient, nil)), Verdict{Class: Transient, Reason: ReasonExplicit}},
		{"value cycle, then explicit", errors.Join(valueLoop{s: []int{1}}, Wrap(Permanent, nil)), Verdict{Class: Permanent, Reason: ReasonExplicit}},
		{"deep chain", deep, Verdict{Class: NeedsAuth, Reason: ReasonExplicit}},
		{"too deep chain", fmt.Errorf("one more: %w", deep), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"typed nil StatusError", nilStatus, Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"typed nil StatusError wrapped", fmt.Errorf("x: %w", nilStatus), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"typed nil StatusError then real", errors.Join(nilStatus, &StatusError{Code: 404}), Verdict{Class: Permanent, Reason: "http_404"}},
		{"typed nil Error then real", errors.Join(nilExplicit, Wrap(NeedsAuth, nil)), Verdict{Class: NeedsAuth, Reason: ReasonExplicit}},
		{"typed nil url.Error", fmt.Errorf("x: %w", nilURL), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"typed nil OpError", errors.Join(nilOp), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"url.Error around typed nil", &url.Error{Op: "Get", URL: "x", Err: nilOp}, Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"panicking Unwrap", panicky{}, Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"panicking Unwrap before explicit", errors.Join(panicky{}, Wrap(Permanent, nil)), Verdict{Class: Permanent, Reason: ReasonExplicit}},
		{"panicking Timeout before explicit", errors.Join(&url.Error{Op: "Get", URL: "x", Err: nilOp}, Wrap(NeedsAuth, nil)),
			Verdict{Class: NeedsAuth, Reason: ReasonExplicit}},
		{"panicking Timeout before status", errors.Join(&url.Error{Op: "Get", URL: "x", Err: nilOp}, &StatusError{Code: 410}),
			Verdict{Class: Permanent, Reason: "http_410"}},
		{"cyclic chain", &cyclic{}, Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{"As method status", fmt.Errorf("x: %w", asStatus{429}), Verdict{Class: RateLimited, Reason: "http_429"}},
		{"As method explicit", asExplicit{}, Verdict{Class: Permanent, Reason: ReasonExplicit}},
		{"undefined explicit class", &Error{Class: Class(200)}, Verdict{Class: Unknown, Reason: ReasonExplicit}},
		{"junk status code", &StatusError{Code: -7}, Verdict{Class: Unknown, Reason: "http_-7"}},
		{"huge status code", &StatusError{Code: 1 << 40}, Verdict{Class: Unknown, Reason: fmt.Sprintf("http_%d", 1<<40)}},
		{"empty join", errors.Join(errors.New("a"), nil), Verdict{Class: Unknown, Reason: ReasonUnknown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify = %+v, want %+v", got, tt.want)
			}
		})
	}
}
