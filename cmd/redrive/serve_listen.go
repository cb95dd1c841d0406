package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/server"
)

// errNoToken is the refusal to serve beyond loopback without a token.
var errNoToken = errors.New("refusing to listen on a non-loopback address without a token: " +
	"set --token or $REDRIVE_TOKEN, or listen on 127.0.0.1")

// swapHandler serves whichever handler was set last.
type swapHandler struct {
	h atomic.Pointer[http.Handler]
}

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// startingRetryAfter is the Retry-After, in seconds, of the answers given
// while the store opens.
const startingRetryAfter = 5

// startingHandler answers while the store opens: /healthz 200 (the
// process is alive and doing what it should), /readyz and every other
// route 503 with Retry-After and reason, as JSON errors like the API's.
func startingHandler(reason string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(startingRetryAfter))
		w.WriteHeader(http.StatusServiceUnavailable)
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "starting", "message": reason}})
		_, _ = w.Write(append(b, '\n'))
	})
}

// minRemoteToken is the shortest token serve accepts when it listens
// beyond loopback.
const minRemoteToken = 16

// tokenBits bounds from above the entropy of a token, in bits: its
// length times log2 of how many distinct characters it uses. A token made
// of few characters (a repeated word, a run of one key) scores low
// however long it is; a generated one scores about its true entropy.
func tokenBits(token string) float64 {
	distinct := map[rune]bool{}
	n := 0
	for _, r := range token {
		distinct[r] = true
		n++
	}
	if len(distinct) < 2 {
		return 0
	}
	return float64(n) * math.Log2(float64(len(distinct)))
}

// weakToken reports a token worth a warning: under 48 bits by tokenBits
// (a random 16-character hex token has about 53).
func weakToken(token string) bool { return tokenBits(token) < 48 }

// allowedHosts are the host names serve answers to: on loopback, the
// loopback names, the listen host and the --allowed-host names; beyond
// loopback, where a token guards the server, only the --allowed-host
// names and the listen host when some are given, else any.
func allowedHosts(listenHost string, extra []string) []string {
	var hosts []string
	switch {
	case config.IsLoopback(listenHost):
		hosts = append(hosts, server.LoopbackHosts...)
	case len(extra) == 0:
		return nil
	}
	if listenHost != "" && listenHost != "0.0.0.0" && listenHost != "::" {
		hosts = append(hosts, listenHost)
	}
	return append(hosts, extra...)
}

// dashboardURL is the address to open the dashboard at.
func dashboardURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// checkListen checks the listen address and the token it needs, and
// returns the host names the server answers to (see allowedHosts).
func checkListen(cfg *config.Serve) ([]string, error) {
	host, err := config.ListenHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("addr: %w", err)
	}
	if cfg.Token == "" && len(cfg.Tokens) == 0 && !config.IsLoopback(host) {
		return nil, fmt.Errorf("--addr %s: %w", cfg.Addr, errNoToken)
	}
	if !config.IsLoopback(host) && cfg.Token != "" && len(cfg.Token) < minRemoteToken {
		return nil, fmt.Errorf("--token: %d characters is too short to guard a server that listens beyond loopback (--addr %s): "+
			"use at least %d, e.g. the output of `openssl rand -hex 24`", len(cfg.Token), cfg.Addr, minRemoteToken)
	}
	return allowedHosts(host, cfg.AllowedHosts), nil
}

// serveLogger returns serve's logger, writing to logOut, and warns there
// about a token that looks guessable.
func serveLogger(cfg *config.Serve, logOut io.Writer) *slog.Logger {
	log := slog.New(durationText(newLogHandler(logOut, cfg.LogFormat, cfg.LogLevel)))
	if cfg.Token != "" && weakToken(cfg.Token) {
		log.Warn("the token looks guessable (few distinct characters for its length): "+
			"use a generated one, e.g. the output of `openssl rand -hex 24`", "bits_at_most", int(tokenBits(cfg.Token)))
	}
	return log
}

// frontDoor is serve's HTTP server. It listens before the store opens
// (PostgreSQL may not be up yet: see --database-wait) so that the process
// answers meanwhile: /healthz 200, /readyz and every other route 503 with
// Retry-After. The real handler replaces that one once the store is open.
type frontDoor struct {
	ln      net.Listener
	srv     *http.Server
	handler *swapHandler
	// done receives what srv.Serve returns.
	done chan error
}

// listen listens on cfg.Addr; start serves.
func listen(cfg *config.Serve, log *slog.Logger) (*frontDoor, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--addr: %w", err)
	}
	f := &frontDoor{ln: ln, handler: &swapHandler{}, done: make(chan error, 1)}
	f.srv = &http.Server{
		Handler:           f.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		// Slow readers: the API moves its own deadline on (a minute
		// without progress, see server.Options.WriteTimeout); this bounds
		// the rest (/metrics, the answers while the store opens).
		WriteTimeout:   2 * time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return f, nil
}

// start serves the handler set last, until shutdown.
func (f *frontDoor) start() { go func() { f.done <- f.srv.Serve(f.ln) }() }

// addr is the address listened on.
func (f *frontDoor) addr() net.Addr { return f.ln.Addr() }

// abort stops the server when serve cannot start after listening (the
// store, the worker or a transport could not be opened) and returns err.
// Told to stop (SIGINT or SIGTERM) while waiting for the database, serve
// shuts down like any other time, without error.
func (f *frontDoor) abort(ctx context.Context, cfg *config.Serve, log *slog.Logger, err error) error {
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if serr := f.srv.Shutdown(shutdownCtx); serr != nil {
		f.srv.Close()
	}
	if errors.Is(err, errStoppedWaiting) {
		log.Info("shutting down", "while", "opening the store")
		log.Info("redrive stopped")
		return nil
	}
	return err
}
