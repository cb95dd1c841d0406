package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The dashboard is a single page served at / with its assets under /ui/.
// Its assets are embedded in the binary and its Content-Security-Policy
// allows requests to its own origin only, so a browser showing it makes
// no request anywhere else.
//
// With tokens, the page first asks for a token (POST /ui/login) and keeps
// a session cookie: the token's name and an HMAC, keyed with the token's
// hash, of the store's session key (store.Secrets), the session's start
// and the name, valid for SessionTTL, HttpOnly and SameSite=Strict. The
// API accepts that cookie in place of the bearer token, with the token's
// role; a request that changes something
// must then also carry the header X-Redrive-Request (which a cross-site
// form cannot send), so the cookie alone never authorizes a change.

//go:embed ui
var uiFiles embed.FS

// SessionTTL is how long a dashboard login lasts.
const SessionTTL = 12 * time.Hour

const (
	sessionCookie = "redrive_session"
	// csrfHeader must accompany every cookie-authenticated request that
	// is not a GET or HEAD.
	csrfHeader = "X-Redrive-Request"
	// maxLoginBody bounds the login form.
	maxLoginBody = 4096
)

// contentSecurityPolicy keeps the dashboard to its own origin: no external
// scripts, styles, fonts, images or connections, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var (
	indexPage = mustRead("ui/index.html")
	loginTmpl = template.Must(template.New("login").Parse(string(mustRead("ui/login.html"))))
)

// dashboardPage returns page with the trace viewer's URL template tmpl
// ("" none) in its redrive-trace-url meta element, which the job page
// reads to link a trace id.
func dashboardPage(page []byte, tmpl string) []byte {
	return bytes.Replace(page, []byte(`<meta name="redrive-trace-url" content="">`),
		[]byte(`<meta name="redrive-trace-url" content="`+template.HTMLEscapeString(tmpl)+`">`), 1)
}

func mustRead(name string) []byte {
	b, err := uiFiles.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return b
}

// dashboardRoutes are the routes of the dashboard, registered with the
// API's routes.
var dashboardRoutes = []string{
	"GET /{$}",
	"GET /ui/",
	"POST /ui/login",
	"POST /ui/logout",
}

func (a *api) dashboardHandlers() map[string]http.Handler {
	assets, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(assets))
	return map[string]http.Handler{
		"GET /{$}": http.HandlerFunc(a.index),
		"GET /ui/": uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The HTML pages are served by index and login only.
			// A file that is not there gets the same JSON 404 (not the
			// file server's plain text).
			name := strings.TrimPrefix(r.URL.Path, "/ui/")
			if _, err := fs.Stat(assets, name); err != nil || strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") {
				writeError(w, &apiError{status: http.StatusNotFound, code: "not_found", msg: "no such dashboard asset"})
				return
			}
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		})),
		"POST /ui/login":  http.HandlerFunc(a.login),
		"POST /ui/logout": http.HandlerFunc(a.logout),
	}
}

// uiHeaders sets the security headers of every dashboard response.
func uiHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// index serves the dashboard, or the login form when a token is set and
// the browser has no valid session.
func (a *api) index(w http.ResponseWriter, r *http.Request) {
	uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		p := anonymous
		if a.authOn() {
			var ok bool
			var err error
			p, ok, err = a.validSession(r)
			if err != nil {
				a.log.Warn("dashboard: the session could not be checked: the session key could not be read from the store", "err", err)
				a.renderLogin(w, http.StatusServiceUnavailable, "The store is unavailable: try again shortly.")
				return
			}
			if !ok {
				a.renderLogin(w, http.StatusOK, "")
				return
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(a.indexFor(p))
	})).ServeHTTP(w, r)
}

func (a *api) renderLogin(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := loginTmpl.Execute(w, map[string]string{"Error": msg}); err != nil {
		a.log.Warn("dashboard: login page not written", "err", err)
	}
}

// login checks the token posted by the login form and starts a session.
func (a *api) login(w http.ResponseWriter, r *http.Request) {
	uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if !a.authOn() {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
		if err := r.ParseForm(); err != nil {
			a.renderLogin(w, http.StatusBadRequest, "The form could not be read.")
			return
		}
		tok := strings.TrimSpace(r.PostForm.Get("token"))
		var t Token
		allowed, right, wait := a.throttle.guess(a.clientKey(r), func() bool {
			var ok bool
			t, ok = a.lookupToken(tok)
			return ok
		})
		if !allowed {
			a.throttled.warn(a.log, "dashboard: sign-in attempts throttled", "remote", r.RemoteAddr, "client", a.clientKey(r), "retry_after", wait.Round(time.Second))
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			a.renderLogin(w, http.StatusTooManyRequests, "Too many sign-in attempts: wait a minute and try again.")
			return
		}
		if !right {
			a.log.Warn("dashboard: login refused", "remote", r.RemoteAddr)
			a.renderLogin(w, http.StatusUnauthorized, "That token is not valid.")
			return
		}
		key, err := a.sessionKey(r.Context())
		if err != nil {
			a.log.Warn("dashboard: no session started: the session key could not be read from the store", "err", err)
			a.renderLogin(w, http.StatusServiceUnavailable, "The store is unavailable: try again shortly.")
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name:     sessionCookie,
			Value:    newSession(t, key, time.Now()),
			Path:     "/",
			MaxAge:   int(SessionTTL / time.Second),
			HttpOnly: true,
			Secure:   a.overTLS(r),
			SameSite: http.SameSiteStrictMode,
		})
		a.log.Info("dashboard: signed in", "token", t.Name, "role", t.Role.String(), "remote", r.RemoteAddr)
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})).ServeHTTP(w, r)
}

// logout ends the browser's session, and every other: the session key
// kept in the store is replaced, so no cookie signed before is valid any
// more, in any process on the store, restarts included: whoever holds a
// stolen cookie is signed out too, whichever token it was made with.
func (a *api) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: a.overTLS(r), SameSite: http.SameSiteStrictMode})
	if a.authOn() {
		p, ok, err := a.validSession(r)
		if err == nil && ok {
			_, err = a.client.Store().RotateSecret(r.Context(), sessionSecret)
		}
		if err != nil {
			a.log.Warn("dashboard: signing out failed: the sessions go on", "remote", r.RemoteAddr, "err", err)
			uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-store")
				a.renderLogin(w, http.StatusServiceUnavailable,
					"Signing out failed: the store is unavailable, so the sessions go on. Try again shortly.")
			})).ServeHTTP(w, r)
			return
		}
		if ok {
			a.log.Info("dashboard: signed out; every session started before is ended", "remote", r.RemoteAddr)
			a.auditLogout(r, p)
		}
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// auditLogout records a sign-out, which ended every session, in the
// audit log: by p, from where r came. A failure to record is logged (the
// sessions are ended).
func (a *api) auditLogout(r *http.Request, p principal) {
	e := store.AuditEntry{Actor: p.name, Role: p.role.String(), Action: "POST /ui/logout", Remote: a.auditRemote(r),
		Status: http.StatusSeeOther, Target: `{"sessions":"all ended"}`}
	if _, err := a.client.Store().AppendAudit(context.WithoutCancel(r.Context()), e); err != nil {
		a.log.Error("audit: the change was made but could not be recorded", "action", e.Action, "actor", e.Actor, "err", err)
	}
}

// overTLS reports whether the browser reached the server over TLS: the
// request itself, or a trusted proxy's X-Forwarded-Proto.
func (a *api) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") || len(a.trusted) == 0 {
		return false
	}
	ip, err := netip.ParseAddr(clientAddr(r))
	return err == nil && a.trustedProxy(ip)
}

// sessionSecret names the store's secret (store.Secrets) that signs the
// session cookies; signing out replaces it.
const sessionSecret = "dashboard_session"

// sessionKey reads the session key from the store, creating it on first
// use.
func (a *api) sessionKey(ctx context.Context) ([]byte, error) {
	return a.client.Store().Secret(ctx, sessionSecret)
}

// newSession returns a session of the token t started at ts:
// "<unix>.<name>.<hmac>".
func newSession(t Token, key []byte, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return ts + "." + t.Name + "." + sessionMAC(t, key, ts)
}

// sessionMAC signs a session's start and token name with the token's
// hash and the store's session key: another token of that name, the
// token's removal, or a sign-out since makes it invalid.
func sessionMAC(t Token, key []byte, ts string) string {
	m := hmac.New(sha256.New, t.SHA256[:])
	m.Write([]byte("redrive dashboard session\x00"))
	m.Write(key)
	m.Write([]byte("\x00"))
	m.Write([]byte(ts))
	m.Write([]byte("\x00"))
	m.Write([]byte(t.Name))
	return hex.EncodeToString(m.Sum(nil))
}

// validSession returns the principal of the session cookie r carries
// when it is one made with a current token and the session key, and
// younger than SessionTTL. The error says the store could not tell (the
// key could not be read).
func (a *api) validSession(r *http.Request) (principal, bool, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return principal{}, false, nil
	}
	ts, rest, ok := strings.Cut(c.Value, ".")
	if !ok || len(ts) > 20 {
		return principal{}, false, nil
	}
	name, mac, ok := strings.Cut(rest, ".")
	if !ok {
		return principal{}, false, nil
	}
	t, ok := a.tokenNamed(name)
	if !ok {
		return principal{}, false, nil
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return principal{}, false, nil
	}
	if age := time.Since(time.Unix(sec, 0)); age < -time.Minute || age >= SessionTTL {
		return principal{}, false, nil
	}
	key, err := a.sessionKey(r.Context())
	if err != nil {
		return principal{}, false, err
	}
	if !hmac.Equal([]byte(mac), []byte(sessionMAC(t, key, ts))) {
		return principal{}, false, nil
	}
	return principal{name: t.Name, role: t.Role}, true, nil
}

// indexFor returns the dashboard's page for p: its body carries the role
// (data-role, which the page's script and style use to hide what the role
// cannot do) and, with tokens, the signed-in name and role and the
// sign-out button. The API refuses what the role cannot do whatever the
// page shows.
func (a *api) indexFor(p principal) []byte {
	body := fmt.Sprintf(`<body data-role="%s">`, p.role)
	page := bytes.Replace(a.indexPage, []byte("<body>"), []byte(body), 1)
	if !a.authOn() {
		return page
	}
	who := fmt.Sprintf(`<span id="whoami" class="whoami" title="signed in with this token">%s · %s</span>
  <form id="logout" method="post" action="/ui/logout">`, template.HTMLEscapeString(p.name), p.role)
	return bytes.Replace(page, []byte(`<form id="logout" method="post" action="/ui/logout" hidden>`), []byte(who), 1)
}
