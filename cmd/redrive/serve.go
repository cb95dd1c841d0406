package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// newServeCmd is `redrive serve`: the engine, the dashboard, the REST API
// and metrics in one process.
func newServeCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the engine, the web dashboard, the REST API and Prometheus metrics",
		Long: `Run a worker (with the built-in http job kind), the web dashboard (/), the
REST API (/v1/..., /healthz, /readyz) and Prometheus metrics (/metrics) in one
process.

With no settings it just works: the SQLite database redrive.db in the current
folder (--db), the API on 127.0.0.1:8080, queue "default" with 10 workers.
Give --database-url to share the work with other processes on PostgreSQL.

/metrics has the store's counts, read at each scrape (redrive_jobs{queue,state},
redrive_<counter>_total, breaker states, paused queues), and this process's
histograms redrive_attempt_duration_seconds{queue,kind,outcome} and
redrive_job_lateness_seconds{queue,kind,attempt_kind="first"|"retry"}.

Every setting is a flag, an environment variable (REDRIVE_ and the flag name
in capitals with underscores, e.g. REDRIVE_SHUTDOWN_TIMEOUT) and a key of the
JSON config file given by --config or $REDRIVE_CONFIG, e.g.

  {"addr": "0.0.0.0:8080", "queues": {"default": 10, "webhooks": 50},
   "http-allow-private": false, "log-level": "debug"}

Flags win over the environment, which wins over the file. A bad value stops
serve at start with a message naming the setting.

The retry policy of failed jobs (the http kind's included) is set by the
--retry-* flags, REDRIVE_RETRY_* variables or the file's "retry" object; a
queue of the file's "queues" object may have its own "retry" object, on top
of the default policy:

  {"retry": {"max_retries": 5, "base": "1s", "max": "5m", "jitter": "full"},
   "queues": {"default": 10,
              "webhooks": {"workers": 50, "retry": {"max_retries": 10}}}}

The delay before retry n (n = 0 for the first) is base * multiplier^n,
capped at max, then randomised by the jitter: none, proportional (+- the
jitter factor), full (0 to d), equal (d/2 to d), decorrelated or additive
(d + up to jitter_max). A server's Retry-After raises a delay up to
max_retry_after. The defaults are 3 retries (4 attempts), 1s doubling to at
most 30s, +-10%: 1s, 2s, 4s. A job's own max_retries still wins.

serve refuses to listen beyond loopback without a token of at least 16
characters (--token or $REDRIVE_TOKEN); with one, the API and /metrics
require "Authorization: Bearer <token>", and the dashboard asks for the
token once. Without a token, on loopback, no web page can drive it: JSON
bodies must be sent as Content-Type: application/json, a request a browser
marks as cross-site or cross-origin may change nothing, and the server
answers only to localhost, 127.0.0.1, [::1], the --addr host and the
--allowed-host names (a DNS-rebinding page gets 421). Beyond loopback the
host check applies when --allowed-host is given, and http jobs may reach
private addresses only with --http-allow-private.
It stops gracefully on SIGINT or SIGTERM: no new requests or jobs, running
ones get --shutdown-timeout to finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(cmd.Flags(), os.Getenv)
			if err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			return runServe(cmd.Context(), cfg, cmd.ErrOrStderr(), nil)
		},
	}
	addServeFlags(cmd.Flags())
	return cmd
}

// errNoToken is the refusal to serve beyond loopback without a token.
var errNoToken = errors.New("refusing to listen on a non-loopback address without a token: " +
	"set --token or $REDRIVE_TOKEN, or listen on 127.0.0.1")

// runServe serves until ctx ends, then shuts down gracefully. Logs go to
// logOut as JSON. ready, when not nil, is called with the address listened
// on once the server accepts connections.
func runServe(ctx context.Context, cfg *serveConfig, logOut io.Writer, ready func(net.Addr)) error {
	host, err := listenHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("addr: %w", err)
	}
	if cfg.Token == "" && !isLoopback(host) {
		return fmt.Errorf("--addr %s: %w", cfg.Addr, errNoToken)
	}
	if !isLoopback(host) && len(cfg.Token) < minRemoteToken {
		return fmt.Errorf("--token: %d characters is too short to guard a server that listens beyond loopback (--addr %s): "+
			"use at least %d, e.g. the output of `openssl rand -hex 24`", len(cfg.Token), cfg.Addr, minRemoteToken)
	}
	allowed := allowedHosts(host, cfg.AllowedHosts)
	log := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: cfg.LogLevel}))

	st, target, err := openServeStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()

	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	retryPolicy := cfg.Retry
	// The histograms of attempt durations and lateness, fed by the worker.
	attempts := newAttemptMetrics(httpjob.Kind)
	worker := redrive.NewWorker(client, redrive.WorkerOptions{
		Queues:             cfg.Queues,
		Policy:             &retryPolicy,
		QueuePolicies:      cfg.QueueRetry,
		ShutdownTimeout:    cfg.ShutdownTimeout,
		Logger:             log,
		Observer:           attempts,
		LeaseDuration:      cfg.Lease,
		CompletedRetention: cfg.CompletedRetention,
		DLQMaxAge:          cfg.DLQMaxAge,
		CleanupInterval:    cfg.CleanupInterval,
		KeyRetention:       cfg.KeyRetention,
		RetryBudget:        cfg.Budget,
		DisableRetryBudget: cfg.NoBudget,
	})
	// No policy of its own for the http kind: a kind's policy would beat
	// the queue's, and the configured policies are per queue.
	httpjob.Register(worker, httpjob.Options{BlockPrivate: !cfg.HTTPAllowPrivate, AllowLinkLocal: cfg.HTTPAllowLinkLocal})

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	// The API's operations (bulk redrives, purges) run on ctx: SIGINT or
	// SIGTERM cancels them, and api.Close below waits for them to stop
	// before the store closes.
	api := server.New(server.Options{Client: client, Breakers: worker.Breakers(), Token: cfg.Token, Logger: log, Context: ctx,
		AllowedHosts: allowed, TrustedProxies: cfg.TrustedProxies})
	srv := &http.Server{
		Handler:           server.HostGuard(allowed, serveMux(api, client, worker.Breakers(), attempts, cfg.Token, log)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	queueRetry := map[string]string{}
	for q, p := range cfg.QueueRetry {
		queueRetry[q] = describePolicy(p)
	}
	hosts := "any (the token guards the server)"
	if len(allowed) > 0 {
		hosts = strings.Join(allowed, ", ")
	}
	log.Info("redrive serving", "addr", ln.Addr().String(), "store", target, "queues", cfg.Queues,
		"auth", cfg.Token != "", "allowed_hosts", hosts, "http_allow_private", cfg.HTTPAllowPrivate,
		"http_allow_link_local", cfg.HTTPAllowLinkLocal, "retry", describePolicy(cfg.Retry), "queue_retry", queueRetry,
		"lease", cfg.Lease.String(), "completed_retention", cfg.CompletedRetention.String(), "dlq_max_age", cfg.DLQMaxAge.String(),
		"key_retention", cfg.KeyRetention.String(), "retry_budget", describeBudget(cfg))
	dashboard := dashboardURL(ln.Addr())
	log.Info("dashboard: "+dashboard, "url", dashboard)
	if isTerminal(logOut) {
		fmt.Fprintf(logOut, "\n  redrive is running: dashboard %s  (Ctrl-C stops it)\n\n", dashboard)
	}
	if ready != nil {
		ready(ln.Addr())
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	case serveErr = <-serveDone:
		log.Error("HTTP server stopped", "error", serveErr)
	case err := <-workerDone:
		// Run only returns early on a programming error.
		log.Error("worker stopped", "error", err)
		serveErr = fmt.Errorf("worker stopped: %v", err)
		workerDone <- err
	}
	// Cancel the API's operations and wait for them (they stop at their
	// next store call or pacing wait), so that requests waiting on one
	// (wait=true) get its final state; then stop taking requests, and let
	// running ones finish, while the worker stops fetching and lets its
	// handlers finish: both within the shutdown timeout.
	_ = api.Close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("HTTP shutdown: closing the remaining connections", "error", err)
			srv.Close()
		}
	})
	stopWorker()
	if err := <-workerDone; err != nil && serveErr == nil {
		serveErr = err
	}
	wg.Wait()
	log.Info("redrive stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// openServeStore opens PostgreSQL when a URL is configured, else SQLite;
// it returns the store and a description fit for logs (no password).
func openServeStore(ctx context.Context, cfg *serveConfig, log *slog.Logger) (store.Store, string, error) {
	if cfg.DatabaseURL != "" {
		st, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Schema: cfg.Schema, Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("database-url %s: %w", redactURL(cfg.DatabaseURL), err)
		}
		return st, "postgres " + redactURL(cfg.DatabaseURL), nil
	}
	st, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Logger: log})
	if err != nil {
		return nil, "", fmt.Errorf("db %s: %w", cfg.DB, err)
	}
	return st, "sqlite " + cfg.DB, nil
}

// serveMux routes /metrics to Prometheus and everything else to the API.
// The metrics are the store's statistics, the breakers, and the attempt
// histograms of the worker's observer.
func serveMux(api http.Handler, client *redrive.Client, breakers *breaker.Registry, attempts *attemptMetrics,
	token string, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&statsCollector{client: client, breakers: breakers, log: log},
		attempts,
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", requireToken(token, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError})))
	mux.Handle("/", api)
	return mux
}

// describeBudget words the retry budget for the start-up log.
func describeBudget(cfg *serveConfig) string {
	if cfg.NoBudget {
		return "off"
	}
	return fmt.Sprintf("%g of recent attempts, at least %d per %s", cfg.Budget.Ratio, cfg.Budget.MinRetries, cfg.Budget.Window)
}

// minRemoteToken is the shortest token serve accepts when it listens
// beyond loopback.
const minRemoteToken = 16

// allowedHosts are the host names serve answers to: on loopback, the
// loopback names, the listen host and the --allowed-host names; beyond
// loopback, where a token guards the server, only the --allowed-host
// names and the listen host when some are given, else any.
func allowedHosts(listenHost string, extra []string) []string {
	var hosts []string
	switch {
	case isLoopback(listenHost):
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

// requireToken guards h with the bearer token, when there is one.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// statsCollector exposes client.Stats and the breakers' states, read at
// every scrape, so the numbers are the store's real counts.
type statsCollector struct {
	client   *redrive.Client
	breakers *breaker.Registry
	log      *slog.Logger
}

var (
	jobsDesc = prometheus.NewDesc("redrive_jobs", "Jobs per queue and state, as the store counts them.",
		[]string{"queue", "state"}, nil)
	counterDesc = map[string]*prometheus.Desc{}
	otherDesc   = prometheus.NewDesc("redrive_events_total", "Other running totals of the store, by name.",
		[]string{"queue", "name", "class"}, nil)
	breakerStateDesc = prometheus.NewDesc("redrive_breaker_state",
		"Circuit breaker state: 1 for the breaker's current state, 0 for the others.", []string{"breaker", "state"}, nil)
	breakerFailuresDesc = prometheus.NewDesc("redrive_breaker_failures",
		"Failures within the breaker's window.", []string{"breaker"}, nil)
	breakerTripsDesc = prometheus.NewDesc("redrive_breaker_trips_total",
		"Times the breaker opened since the process started.", []string{"breaker"}, nil)
	statsUpDesc = prometheus.NewDesc("redrive_stats_up",
		"1 when the last read of the store's statistics succeeded, else 0.", nil, nil)
	queuePausedDesc = prometheus.NewDesc("redrive_queue_paused",
		"1 when the queue is paused (workers fetch none of its jobs), else 0.", []string{"queue"}, nil)
)

// counterHelp describes the store's counters exported as
// redrive_<name>_total{queue,class}.
var counterHelp = map[string]string{
	store.StatAttempts:            "Attempts started.",
	store.StatSucceeded:           "Attempts that completed their job.",
	store.StatSucceededAfterRetry: "Completions on an attempt after the first.",
	store.StatFailed:              "Failed attempts, by failure class.",
	store.StatRetried:             "Retries scheduled.",
	store.StatDead:                "Jobs moved to the dead-letter queue, by failure class.",
	store.StatRedriven:            "Jobs redriven from the dead-letter queue.",
	store.StatSnoozed:             "Jobs snoozed by their handler.",
	store.StatDeferred:            "Jobs deferred by an open circuit breaker.",
	store.StatRescued:             "Expired leases rescued.",
	store.StatEnqueued:            "Jobs created.",
	store.StatDeduplicated:        "Enqueues answered by an existing job (idempotency key).",
	store.StatCanceled:            "Jobs canceled.",
	store.StatPurged:              "Dead jobs purged or expired.",
}

func init() {
	for name, help := range counterHelp {
		counterDesc[name] = prometheus.NewDesc("redrive_"+name+"_total", help, []string{"queue", "class"}, nil)
	}
}

// Describe sends the collector's fixed descriptions.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- otherDesc
	for _, d := range counterDesc {
		ch <- d
	}
	ch <- breakerStateDesc
	ch <- breakerFailuresDesc
	ch <- breakerTripsDesc
	ch <- statsUpDesc
	ch <- queuePausedDesc
}

// Collect reads the statistics from the store and the breakers.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.client.Stats(ctx)
	up := 1.0
	if err != nil {
		up = 0
		c.log.Warn("metrics: reading the statistics failed", "error", err)
	}
	qs, qerr := c.client.Store().Queues(ctx)
	if qerr != nil {
		up = 0
		c.log.Warn("metrics: reading the queues failed", "error", qerr)
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, up)
	for _, q := range qs {
		v := 0.0
		if q.Paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, v, q.Name)
	}
	for queue, states := range st.Jobs {
		for _, s := range store.States {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(states[s]), queue, string(s))
		}
	}
	for queue, counters := range st.Counters {
		for key, n := range counters {
			name, class, _ := strings.Cut(key, ".")
			if d, ok := counterDesc[name]; ok {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), queue, class)
			} else {
				ch <- prometheus.MustNewConstMetric(otherDesc, prometheus.CounterValue, float64(n), queue, name, class)
			}
		}
	}
	if c.breakers == nil {
		return
	}
	for _, b := range c.breakers.Statuses() {
		for _, s := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
			v := 0.0
			if b.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, v, b.Name, s.String())
		}
		ch <- prometheus.MustNewConstMetric(breakerFailuresDesc, prometheus.GaugeValue, float64(b.Failures), b.Name)
		ch <- prometheus.MustNewConstMetric(breakerTripsDesc, prometheus.CounterValue, float64(b.Trips), b.Name)
	}
}
