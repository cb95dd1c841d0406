package server

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store/sqlite"
)

// noRedirect is a client that returns redirects instead of following them.
func noRedirect(e *env) *http.Client {
	c := *e.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func (e *env) login(token string) *http.Response {
	e.t.Helper()
	res, err := noRedirect(e).PostForm(e.srv.URL+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	return res
}

func sessionOf(t *testing.T, res *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", sessionCookie, res.Header)
	return nil
}

func TestDashboardWithoutToken(t *testing.T) {
	e := newEnv(t, Options{})
	r := e.do("GET", "/", "")
	if r.status != 200 || !strings.Contains(string(r.body), `src="/ui/app.js"`) {
		t.Fatalf("GET /: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), `action="/ui/logout">`) {
		t.Error("sign-out button shown without a token")
	}
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, asset := range []string{"/ui/app.js", "/ui/app.css"} {
		r := e.do("GET", asset, "")
		if r.status != 200 || len(r.body) < 1000 || r.header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d, %d bytes, CSP %q", asset, r.status, len(r.body), r.header.Get("Content-Security-Policy"))
		}
	}
	// The HTML templates are not served raw, and unknown assets are 404.
	for _, p := range []string{"/ui/login.html", "/ui/index.html", "/ui/", "/ui/nope.js"} {
		if r := e.do("GET", p, ""); r.status != 404 {
			t.Errorf("GET %s: %d, want 404", p, r.status)
		}
	}
	// Without a token, login just goes back to the dashboard.
	if res := e.login("anything"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("login without token: %d", res.StatusCode)
	}
}

func TestDashboardLogin(t *testing.T) {
	e := newEnv(t, Options{Token: "tok-123"})
	e.token = "" // requests below authenticate themselves

	// No session: the login form, and the API refuses.
	r := e.do("GET", "/", "")
	if r.status != 200 || !strings.Contains(string(r.body), `name="token"`) || strings.Contains(string(r.body), "app.js") {
		t.Fatalf("GET / without a session: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/v1/stats", ""), 401, "unauthorized", "")

	// A wrong token: 401 and the form again with a message; no cookie.
	res := e.login("nope")
	if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", res.StatusCode, res.Cookies())
	}

	// The right token: a session cookie, HttpOnly and SameSite=Strict.
	res = e.login("tok-123")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	c := sessionOf(t, res)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge != int(SessionTTL/time.Second) {
		t.Errorf("cookie attributes: %+v", c)
	}
	if strings.Contains(c.Value, "tok-123") {
		t.Error("the session cookie holds the token itself")
	}
	cookie := c.Name + "=" + c.Value

	// With the cookie: the dashboard, and the API reads.
	r = e.do("GET", "/", "", "Cookie", cookie)
	if !strings.Contains(string(r.body), "app.js") || !strings.Contains(string(r.body), `action="/ui/logout">`) {
		t.Fatalf("GET / with a session: %s", r.body)
	}
	e.want(e.do("GET", "/v1/stats", "", "Cookie", cookie), 200, nil)

	// A change needs the X-Redrive-Request header besides the cookie, so
	// a cross-site form cannot make one.
	body := `{"kind":"k","payload":{}}`
	wantErr(t, e.do("POST", "/v1/jobs", body, "Cookie", cookie, "Content-Type", "application/json"), 403, "csrf", "")
	e.want(e.do("POST", "/v1/jobs", body, "Cookie", cookie, "Content-Type", "application/json", csrfHeader, "1"), 201, nil)

	// A bearer token still works alongside, and a wrong bearer token is
	// refused even with a valid cookie.
	e.want(e.do("GET", "/v1/stats", "", "Authorization", "Bearer tok-123"), 200, nil)
	wantErr(t, e.do("GET", "/v1/stats", "", "Authorization", "Bearer wrong", "Cookie", cookie), 401, "unauthorized", "")

	// Logout clears the cookie.
	res, err := noRedirect(e).Post(e.srv.URL+"/ui/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if c := sessionOf(t, res); c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("logout cookie: %+v", c)
	}
}

func TestDashboardSessionForgedOrExpired(t *testing.T) {
	e := newEnv(t, Options{Token: "tok-123"})
	e.token = ""
	tok := Token{Name: LegacyTokenName, Role: RoleAdmin, SHA256: sha256.Sum256([]byte("tok-123"))}
	other := Token{Name: LegacyTokenName, Role: RoleAdmin, SHA256: sha256.Sum256([]byte("another-token"))}
	key, err := e.st.Secret(context.Background(), sessionSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := map[string]string{
		"other token":  newSession(other, key, now),
		"other key":    newSession(tok, []byte("another key"), now),
		"expired":      newSession(tok, key, now.Add(-SessionTTL-time.Minute)),
		"future":       newSession(tok, key, now.Add(time.Hour)),
		"tampered ts":  strconv.FormatInt(now.Unix()+1, 10) + newSession(tok, key, now)[len(strconv.FormatInt(now.Unix(), 10)):],
		"no mac":       strconv.FormatInt(now.Unix(), 10),
		"garbage":      "x.y",
		"old format":   strconv.FormatInt(now.Unix(), 10) + "." + sessionMAC(tok, key, strconv.FormatInt(now.Unix(), 10)),
		"other name":   strings.Replace(newSession(tok, key, now), "."+LegacyTokenName+".", ".root.", 1),
		"long ts":      strings.Repeat("9", 40) + "." + sessionMAC(tok, key, strings.Repeat("9", 40)),
		"empty":        "",
		"mac only":     "." + sessionMAC(tok, key, ""),
		"non-numeric":  "abc." + sessionMAC(tok, key, "abc"),
		"negative age": "-5." + sessionMAC(tok, key, "-5"),
	}
	for name, v := range cases {
		r := e.do("GET", "/v1/stats", "", "Cookie", sessionCookie+"="+v)
		if r.status != 401 {
			t.Errorf("%s session %q: status %d, want 401", name, v, r.status)
		}
	}
	if r := e.do("GET", "/v1/stats", "", "Cookie", sessionCookie+"="+newSession(tok, key, now.Add(-SessionTTL+time.Minute))); r.status != 200 {
		t.Errorf("a session about to expire: %d, want 200", r.status)
	}
}

func TestDashboardLoginBodyBounded(t *testing.T) {
	e := newEnv(t, Options{Token: "tok-123"})
	res, err := noRedirect(e).PostForm(e.srv.URL+"/ui/login", url.Values{"token": {strings.Repeat("a", 10*maxLoginBody)}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || len(res.Cookies()) != 0 {
		t.Errorf("oversized login: %d, cookies %v", res.StatusCode, res.Cookies())
	}
}

// TestDashboardLogoutKeptInStore: signing out ends every session for
// good, in every process on the store: one that was already running,
// and one started after (a restart), which used to accept again the
// cookies made before the first sign-out.
func TestDashboardLogoutKeptInStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	open := func() *sqlite.Store {
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: quiet, Synchronous: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st := open()
	a := newEnvOn(t, st, Options{Token: "tok-123"})
	b := newEnvOn(t, st, Options{Token: "tok-123"})
	a.token, b.token = "", ""
	cookie := sessionCookie + "=" + sessionOf(t, a.login("tok-123")).Value
	for name, e := range map[string]*env{"a": a, "b": b} {
		if r := e.do("GET", "/v1/stats", "", "Cookie", cookie); r.status != 200 {
			t.Fatalf("process %s before signing out: %d", name, r.status)
		}
	}
	res, err := noRedirect(a).Do(mustRequest(t, "POST", a.srv.URL+"/ui/logout", "Cookie", cookie))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for name, e := range map[string]*env{"a": a, "b": b} {
		wantErr(t, e.do("GET", "/v1/stats", "", "Cookie", cookie), 401, "unauthorized", "")
		if r := e.do("GET", "/", "", "Cookie", cookie); !strings.Contains(string(r.body), `name="token"`) {
			t.Errorf("process %s: the dashboard after signing out: %d %s", name, r.status, r.body)
		}
	}

	// A restart: the store closed and opened again, a new server.
	a.srv.Close()
	b.srv.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c := newEnvOn(t, open(), Options{Token: "tok-123"})
	c.token = ""
	wantErr(t, c.do("GET", "/v1/stats", "", "Cookie", cookie), 401, "unauthorized", "")
	// A new sign-in works.
	fresh := sessionCookie + "=" + sessionOf(t, c.login("tok-123")).Value
	c.want(c.do("GET", "/v1/stats", "", "Cookie", fresh), 200, nil)
}

func mustRequest(t *testing.T, method, url string, headers ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

// TestDashboardSessionStoreDown: when the store cannot give the session
// key, a session is neither accepted nor refused (503, not 401), and a
// sign-out says it failed rather than pretend the sessions ended.
func TestDashboardSessionStoreDown(t *testing.T) {
	e := newEnv(t, Options{Token: "tok-123"})
	e.token = ""
	cookie := sessionCookie + "=" + sessionOf(t, e.login("tok-123")).Value
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do("GET", "/v1/stats", "", "Cookie", cookie), 503, "unavailable", "")
	if r := e.do("GET", "/", "", "Cookie", cookie); r.status != 503 {
		t.Errorf("dashboard with the store down: %d", r.status)
	}
	res, err := noRedirect(e).Do(mustRequest(t, "POST", e.srv.URL+"/ui/logout", "Cookie", cookie))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || !strings.Contains(string(b), "Signing out failed") {
		t.Errorf("sign-out with the store down: %d %s", res.StatusCode, b)
	}
	if res := e.login("tok-123"); res.StatusCode != 503 || len(res.Cookies()) != 0 {
		t.Errorf("sign-in with the store down: %d, cookies %v", res.StatusCode, res.Cookies())
	}
}
