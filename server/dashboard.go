package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The dashboard is a single page served at / with its assets under /ui/.
// Its assets are embedded in the binary and its Content-Security-Policy
// allows requests to its own origin only, so a browser showing it makes
// no request anywhere else.
//
// With a token, the page first asks for the token (POST /ui/login) and
// keeps a session cookie: an HMAC of the token and the session's start,
// valid for SessionTTL, HttpOnly and SameSite=Strict. The API accepts that
// cookie in place of the bearer token; a request that changes something
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
	// indexPageAuth is the page shown with a token: with a sign-out button.
	indexPageAuth = bytes.Replace(indexPage, []byte(`action="/ui/logout" hidden>`), []byte(`action="/ui/logout">`), 1)
	loginTmpl     = template.Must(template.New("login").Parse(string(mustRead("ui/login.html"))))
)

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
			if strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") {
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
		if a.token != nil && !a.validSession(r) {
			a.renderLogin(w, http.StatusOK, "")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		page := indexPage
		if a.token != nil {
			page = indexPageAuth
		}
		_, _ = w.Write(page)
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
		if a.token == nil {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if ok, wait := a.throttle.allow(clientAddr(r)); !ok {
			a.log.Warn("dashboard: sign-in attempts throttled", "remote", r.RemoteAddr, "retry_after", wait.Round(time.Second))
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			a.renderLogin(w, http.StatusTooManyRequests, "Too many sign-in attempts: wait a minute and try again.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
		if err := r.ParseForm(); err != nil {
			a.renderLogin(w, http.StatusBadRequest, "The form could not be read.")
			return
		}
		tok := strings.TrimSpace(r.PostForm.Get("token"))
		if subtle.ConstantTimeCompare([]byte(tok), a.token) != 1 {
			a.log.Warn("dashboard: login refused", "remote", r.RemoteAddr)
			a.renderLogin(w, http.StatusUnauthorized, "That token is not valid.")
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name:     sessionCookie,
			Value:    a.newSession(time.Now()),
			Path:     "/",
			MaxAge:   int(SessionTTL / time.Second),
			HttpOnly: true,
			Secure:   a.overTLS(r),
			SameSite: http.SameSiteStrictMode,
		})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})).ServeHTTP(w, r)
}

// logout ends the browser's session, and every other: the session epoch
// moves, so no cookie minted before is valid any more (there is one
// token, hence one identity; a restart of the server does the same).
func (a *api) logout(w http.ResponseWriter, r *http.Request) {
	if a.token != nil && a.validSession(r) {
		a.epoch.Add(1)
		a.log.Info("dashboard: signed out; every session started before is ended", "remote", r.RemoteAddr)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: a.overTLS(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
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
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// newSession returns a session value started at t: "<unix>.<hmac>".
func (a *api) newSession(t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return ts + "." + a.sessionMAC(ts)
}

func (a *api) sessionMAC(ts string) string {
	m := hmac.New(sha256.New, a.token)
	m.Write([]byte("redrive dashboard session\x00"))
	m.Write([]byte(strconv.FormatUint(a.epoch.Load(), 10) + "\x00"))
	m.Write([]byte(ts))
	return hex.EncodeToString(m.Sum(nil))
}

// validSession reports whether r carries a session cookie made with the
// current token and younger than SessionTTL.
func (a *api) validSession(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	ts, mac, ok := strings.Cut(c.Value, ".")
	if !ok || len(ts) > 20 {
		return false
	}
	if !hmac.Equal([]byte(mac), []byte(a.sessionMAC(ts))) {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	age := time.Since(time.Unix(sec, 0))
	return age >= -time.Minute && age < SessionTTL
}
