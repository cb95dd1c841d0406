package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// jobsOf counts the jobs of a kind.
func jobsOf(t *testing.T, c *redrive.Client, kind string) int64 {
	t.Helper()
	n, err := c.Count(context.Background(), redrive.Filter{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func isPaused(t *testing.T, c *redrive.Client, name string) bool {
	t.Helper()
	qs, err := c.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return queuePaused(qs, name)
}

// TestCrossSiteRequestsRefused: without a token, a request a browser
// marks as coming from another site or origin changes nothing; requests
// of clients that are not browsers (no Origin, no Sec-Fetch-Site) and
// same-origin requests of the dashboard still work.
func TestCrossSiteRequestsRefused(t *testing.T) {
	e := newEnv(t, Options{})
	job := `{"kind":"evil","payload":{}}`
	for _, h := range [][]string{
		{"Origin", "https://evil.example", "Content-Type", "text/plain"},
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "null"},
	} {
		wantErr(t, e.do("POST", "/v1/jobs", job, h...), 403, "cross_origin", "")
		wantErr(t, e.do("POST", "/v1/queues/default/pause", "", h...), 403, "cross_origin", "")
	}
	if n := jobsOf(t, e.client, "evil"); n != 0 || isPaused(t, e.client, "default") {
		t.Fatalf("cross-site requests changed something: %d jobs, paused %v", n, isPaused(t, e.client, "default"))
	}
	// Reads stay open to whoever can reach them (the Host check guards
	// against rebinding); a browser's same-origin requests and plain
	// clients work.
	e.want(e.do("GET", "/v1/stats", "", "Sec-Fetch-Site", "cross-site"), 200, nil)
	self := e.srv.URL
	e.want(e.do("POST", "/v1/jobs", job, "Origin", self, "Sec-Fetch-Site", "same-origin"), 201, nil)
	e.want(e.do("POST", "/v1/jobs", job, "Sec-Fetch-Site", "none"), 201, nil)
	e.want(e.do("POST", "/v1/jobs", job), 201, nil)
	if n := jobsOf(t, e.client, "evil"); n != 3 {
		t.Fatalf("%d jobs from the allowed requests, want 3", n)
	}
}

// TestJSONContentTypeRequired: a JSON body must say so.
func TestJSONContentTypeRequired(t *testing.T) {
	e := newEnv(t, Options{})
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", "bogus;;"} {
		wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Type", ct), 415, "unsupported_media_type", "")
		wantErr(t, e.do("POST", "/v1/dlq/redrive", `{"ids":[1]}`, "Content-Type", ct), 415, "unsupported_media_type", "")
	}
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Type", "application/json; charset=utf-8"), 201, nil)
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k"}`, "Content-Type", "Application/JSON"), 201, nil)
	if n := jobsOf(t, e.client, "k"); n != 2 {
		t.Fatalf("%d jobs, want the 2 sent as JSON", n)
	}
}

// TestHostCheck: with allowed hosts, a request naming another host (a
// DNS-rebinding page) gets 421 and reaches nothing.
func TestHostCheck(t *testing.T) {
	e := newEnv(t, Options{AllowedHosts: append(append([]string{}, LoopbackHosts...), "redrive.internal")})
	_, port, _ := strings.Cut(strings.TrimPrefix(e.srv.URL, "http://"), ":")
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "LOCALHOST", "localhost.", "redrive.internal:443", "[::ffff:127.0.0.1]:" + port} {
		e.want(e.do("GET", "/v1/stats", "", "Host", host), 200, nil)
	}
	for _, host := range []string{"evil.test:" + port, "rebind.example", "127.0.0.2:" + port, "localhost.evil.test", ""} {
		r := e.do("GET", "/v1/stats", "", "Host", host)
		if host == "" {
			// Go's client sends the URL's host when Host is empty.
			continue
		}
		wantErr(t, r, 421, "host_not_allowed", "")
		if !strings.Contains(string(r.body), "--allowed-host") {
			t.Errorf("the refusal does not say how to allow the host: %s", r.body)
		}
		wantErr(t, e.do("GET", "/", "", "Host", host), 421, "host_not_allowed", "")
		wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"x"}`, "Host", host), 421, "host_not_allowed", "")
	}
	if n := jobsOf(t, e.client, "x"); n != 0 {
		t.Fatalf("a request to a foreign host created %d jobs", n)
	}
}

// TestLoginThrottled: after five bad sign-ins a client waits.
func TestLoginThrottled(t *testing.T) {
	e := newEnv(t, Options{Token: "0123456789abcdef-token"})
	c := e.srv.Client()
	for i := range 5 {
		res, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {"wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Fatalf("bad sign-in %d: status %d, want 401", i+1, res.StatusCode)
		}
	}
	res, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {"0123456789abcdef-token"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth sign-in: status %d, Retry-After %q; want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// The bucket refills: one attempt per 12 s.
	now := time.Now()
	th := loginThrottle{now: func() time.Time { return now }}
	for range 5 {
		if ok, _ := th.allow("a"); !ok {
			t.Fatal("burst refused")
		}
	}
	if ok, wait := th.allow("a"); ok || wait <= 0 || wait > loginEvery {
		t.Fatalf("over the burst: ok %v, wait %v", ok, wait)
	}
	if ok, _ := th.allow("b"); !ok {
		t.Fatal("another client was throttled")
	}
	now = now.Add(loginEvery)
	if ok, _ := th.allow("a"); !ok {
		t.Fatal("no attempt after the refill period")
	}
}

// TestSignOutRevokes: a session cookie stops working once its browser
// (or any other) signs out.
func TestSignOutRevokes(t *testing.T) {
	e := newEnv(t, Options{Token: "0123456789abcdef-token"})
	c := e.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {"0123456789abcdef-token"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	cookie := sessionOf(t, res)
	get := func() int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/stats", nil)
		req.AddCookie(cookie)
		r, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if s := get(); s != 200 {
		t.Fatalf("with the session: %d", s)
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/ui/logout", nil)
	req.AddCookie(cookie)
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if s := get(); s != 401 {
		t.Fatalf("the cookie of a signed-out session still works: %d", s)
	}
}

// TestSecureCookieBehindTrustedProxy: the session cookie is Secure over
// TLS, or behind a trusted proxy that says https; not when anyone else
// says so.
func TestSecureCookieBehindTrustedProxy(t *testing.T) {
	login := func(trusted []netip.Prefix, header string) bool {
		e := newEnv(t, Options{Token: "0123456789abcdef-token", TrustedProxies: trusted})
		c := e.srv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		req, _ := http.NewRequest("POST", e.srv.URL+"/ui/login", strings.NewReader("token=0123456789abcdef-token"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if header != "" {
			req.Header.Set("X-Forwarded-Proto", header)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return sessionOf(t, res).Secure
	}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	if !login(loopback, "https") {
		t.Error("behind a trusted proxy saying https: cookie not Secure")
	}
	if login(elsewhere, "https") || login(nil, "https") || login(loopback, "http") {
		t.Error("cookie Secure although no trusted proxy said https")
	}
	srv := httptest.NewTLSServer(New(Options{Client: newEnv(t, Options{}).client, Token: "0123456789abcdef-token", Logger: quiet}))
	defer srv.Close()
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.PostForm(srv.URL+"/ui/login", url.Values{"token": {"0123456789abcdef-token"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if !sessionOf(t, res).Secure {
		t.Error("over TLS: cookie not Secure")
	}
}

// TestNamesAndUTF8: invalid UTF-8 is refused, not replaced; names follow
// their character set.
func TestNamesAndUTF8(t *testing.T) {
	e := newEnv(t, Options{})
	wantErr(t, e.do("POST", "/v1/jobs", "{\"kind\":\"k\\u0000\",\"payload\":\"\xff\"}"), 400, "malformed_json", "")
	wantErr(t, e.do("POST", "/v1/jobs", "{\"kind\":\"caf\xe9\"}"), 400, "malformed_json", "")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"a/b"}`), 400, "invalid", "kind")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k","queue":" padded"}`), 400, "invalid", "queue")
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k\u202egnp.exe"}`), 400, "invalid", "kind")
	wantErr(t, e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"ok"},{"kind":"k","dependency":"x\ty"}]}`), 400, "invalid", "jobs[1].dependency")
	if n := jobsOf(t, e.client, ""); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
}
