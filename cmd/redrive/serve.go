package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/retry"
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
Until PostgreSQL can be reached (refused, timed out, unknown host, starting
up), serve tries again, 1s doubling to 10s apart, for --database-wait
(default 15m; 0: not at all), logging each attempt; meanwhile it listens,
/healthz answers 200 and /readyz and every other route 503. An error that
waiting cannot fix (authentication, an unknown database, TLS) stops it at once.

/metrics has the store's counts, read at each scrape (redrive_jobs{queue,state},
redrive_<counter>_total, paused queues, redrive_queue_latency_seconds{queue},
redrive_queue_unconsumed{queue}, the fleet's circuit breakers
redrive_fleet_breaker_*{breaker}), which every process sharing the store
reports alike (aggregate them with max, not sum), and this process's breaker
states and histograms redrive_attempt_duration_seconds{queue,kind,outcome} and
redrive_job_lateness_seconds{queue,kind,attempt_kind="first"|"retry"}.

With --kafka-brokers (or $REDRIVE_KAFKA_BROKERS) and --kafka-topics, serve
keeps the dead letters of those Kafka main topics in the store: a keeper
(consumer group redrive-dlt-keeper) copies each record of <topic>-dlt into a
dead job of kind kafka in the store queue of the same name, committing the
record's offset only once the job is stored; redriving the job produces the
record back to its topic, key, value and headers byte-exact. GET
/v1/kafka/topics, the dashboard and /metrics (redrive_kafka_*) show each
topic's records per retry tier and DLT, the lag of --kafka-group and the
keeper's totals. Do not also redrive these DLTs with
` + "`dlq redrive --kafka-topic`" + `: a dead letter would run twice.

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
characters (--token or $REDRIVE_TOKEN), and warns about one that looks
guessable; with one, the API and /metrics require "Authorization: Bearer
<token>", and the dashboard asks for the token once. Wrong tokens are
throttled per client: 5, then one every 12 s. Without a token, on loopback, no web page can drive it: JSON
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
			cfg, err := config.Load(cmd.Flags(), os.Getenv)
			if err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			return runServe(cmd.Context(), cfg, cmd.ErrOrStderr(), nil)
		},
	}
	config.AddFlags(cmd.Flags())
	return cmd
}

// errNoToken is the refusal to serve beyond loopback without a token.
var errNoToken = errors.New("refusing to listen on a non-loopback address without a token: " +
	"set --token or $REDRIVE_TOKEN, or listen on 127.0.0.1")

// runServe serves until ctx ends, then shuts down gracefully. Logs go to
// logOut in cfg.LogFormat (JSON unless logOut is a terminal or text is
// asked for). ready, when not nil, is called with the address listened
// on once the server accepts connections.
func runServe(ctx context.Context, cfg *config.Serve, logOut io.Writer, ready func(net.Addr)) error {
	host, err := config.ListenHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("addr: %w", err)
	}
	if cfg.Token == "" && !config.IsLoopback(host) {
		return fmt.Errorf("--addr %s: %w", cfg.Addr, errNoToken)
	}
	if !config.IsLoopback(host) && len(cfg.Token) < minRemoteToken {
		return fmt.Errorf("--token: %d characters is too short to guard a server that listens beyond loopback (--addr %s): "+
			"use at least %d, e.g. the output of `openssl rand -hex 24`", len(cfg.Token), cfg.Addr, minRemoteToken)
	}
	allowed := allowedHosts(host, cfg.AllowedHosts)
	log := slog.New(durationText(newLogHandler(logOut, cfg.LogFormat, cfg.LogLevel)))
	if cfg.Token != "" && weakToken(cfg.Token) {
		log.Warn("the token looks guessable (few distinct characters for its length): "+
			"use a generated one, e.g. the output of `openssl rand -hex 24`", "bits_at_most", int(tokenBits(cfg.Token)))
	}

	// Listen first, so that while the store opens (PostgreSQL may not be
	// up yet: see --database-wait) the process answers: /healthz 200,
	// /readyz and every other route 503 with Retry-After. The real
	// handler replaces that one once the store is open.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	handler := &swapHandler{}
	handler.set(server.HostGuard(allowed, startingHandler(openingReason(cfg))))
	srv := &http.Server{
		Handler:           handler,
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
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	log.Info("redrive starting: opening the store", "addr", ln.Addr().String(), "store", storeDescription(cfg))

	st, target, err := openServeStore(ctx, cfg, log)
	if err != nil {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if serr := srv.Shutdown(shutdownCtx); serr != nil {
			srv.Close()
		}
		if errors.Is(err, errStoppedWaiting) {
			// SIGINT or SIGTERM while waiting for the database: a
			// shutdown like any other.
			log.Info("shutting down", "while", "opening the store")
			log.Info("redrive stopped")
			return nil
		}
		return err
	}
	defer st.Close()

	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	retryPolicy := cfg.Retry
	// The histograms of attempt durations and lateness, fed by the worker.
	attempts := metrics.NewObserver(cfg.Kinds()...)
	// The breakers: the configured dependencies' and, on first use, one
	// per other dependency or http host with the default configuration.
	breakers := cfg.Breakers.Registry()
	worker := redrive.NewWorker(client, redrive.WorkerOptions{
		Queues:             cfg.Queues,
		Policy:             &retryPolicy,
		QueuePolicies:      cfg.QueueRetry,
		Classifier:         cfg.Classify.Classifier,
		QueueClassifiers:   cfg.Classify.QueueClassifiers,
		Breakers:           breakers,
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
		Periodic:           cfg.Schedules,
	})
	// No policy of its own for the http kind: a kind's policy would beat
	// the queue's, and the configured policies are per queue.
	httpOpts := httpjob.Options{BlockPrivate: !cfg.HTTPAllowPrivate, AllowLinkLocal: cfg.HTTPAllowLinkLocal,
		AllowLinkLocalSetting: "--http-allow-link-local", AllowPrivateSetting: "--http-allow-private"}
	if cfg.Breakers.HTTP {
		httpOpts.Breakers, httpOpts.Dependency = breakers, cfg.Breakers.HTTPDependency
	}
	httpjob.Register(worker, httpOpts)
	// The download kind, with the http kind's guard, when --download-dir
	// is set; otherwise its jobs are refused at enqueue.
	if err := registerDownload(worker, cfg); err != nil {
		return fmt.Errorf("download: %w", err)
	}

	// The RabbitMQ queues managed for consumers in any language, decided
	// by the same policies as the store's queues.
	brokers, err := newBrokerSide(cfg, client, worker, redrive.ExecutorOptions{Policy: &retryPolicy,
		QueuePolicies: cfg.QueueRetry, Classifier: cfg.Classify.Classifier, QueueClassifiers: cfg.Classify.QueueClassifiers,
		Logger: log, Observer: attempts, RetryBudget: cfg.Budget,
		DisableRetryBudget: cfg.NoBudget}, log)
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	var managed server.Brokers
	var brokerDone <-chan error
	if brokers != nil {
		managed, brokerDone = brokers, brokers.done()
	}
	// The Kafka topics whose dead letters are kept in the store, their
	// topologies named by the same policies.
	keptTopics, err := newKafkaSide(cfg, client, worker, log)
	if err != nil {
		if brokers != nil {
			brokers.stop()
		}
		return fmt.Errorf("kafka: %w", err)
	}
	var kept server.KafkaTopics
	var kafkaDone <-chan error
	if keptTopics != nil {
		kept, kafkaDone = keptTopics, keptTopics.done()
	}

	// The API's operations (bulk redrives, purges) run on ctx: SIGINT or
	// SIGTERM cancels them, and api.Close below waits for them to stop
	// before the store closes.
	api := server.New(server.Options{Client: client, Breakers: worker.Breakers(), Token: cfg.Token, Logger: log, Context: ctx, ExportDir: cfg.ExportDir,
		AllowedHosts: allowed, TrustedProxies: cfg.TrustedProxies, Brokers: managed, Kafka: kept})
	handler.set(server.HostGuard(allowed, serveMux(api, client, worker.Breakers(), attempts, managed, kept, log)))

	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()
	if brokers != nil {
		brokers.start(workerCtx)
		log.Info("managing RabbitMQ queues", "broker", amqp.Redact(cfg.AMQP.URL), "queues", cfg.AMQP.ManagedNames(),
			"failure_exchange", cfg.AMQP.FailureExchange, "dead_letters", cfg.AMQP.DeadLetters, "quorum", cfg.AMQP.Quorum)
	}
	if keptTopics != nil {
		keptTopics.start(workerCtx)
		log.Info("keeping Kafka dead-letter topics in the store", "brokers", cfg.Kafka.Brokers, "topics", cfg.Kafka.TopicNames(),
			"group", cfg.Kafka.Group, "keeper_group", keptTopics.keeper.Group())
	}

	queueRetry := map[string]string{}
	for q, p := range cfg.QueueRetry {
		queueRetry[q] = config.DescribePolicy(p)
	}
	hosts := "any (the token guards the server)"
	if len(allowed) > 0 {
		hosts = strings.Join(allowed, ", ")
	}
	log.Info("redrive serving", "addr", ln.Addr().String(), "store", target, "queues", cfg.Queues,
		"auth", cfg.Token != "", "allowed_hosts", hosts, "http_allow_private", cfg.HTTPAllowPrivate,
		"http_allow_link_local", cfg.HTTPAllowLinkLocal, "download_dir", describeDownloadDir(cfg), "retry", config.DescribePolicy(cfg.Retry), "queue_retry", queueRetry,
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
	case err := <-brokerDone:
		serveErr = fmt.Errorf("amqp: %w", err)
	case err := <-kafkaDone:
		serveErr = fmt.Errorf("kafka: %w", err)
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
	if brokers != nil {
		brokers.stop()
	}
	if keptTopics != nil {
		keptTopics.stop()
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
// PostgreSQL is waited for as --database-wait says (see openPostgres);
// when ctx ends meanwhile, the error is errStoppedWaiting.
func openServeStore(ctx context.Context, cfg *config.Serve, log *slog.Logger) (store.Store, string, error) {
	if cfg.DatabaseURL != "" {
		st, err := openPostgres(ctx, cfg, log, dbWaitPolicy)
		if err != nil {
			return nil, "", err
		}
		return st, storeDescription(cfg), nil
	}
	st, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Logger: log})
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", errStoppedWaiting
		}
		return nil, "", fmt.Errorf("db %s: %w", cfg.DB, err)
	}
	return st, storeDescription(cfg), nil
}

// storeDescription names the store for logs (no password).
func storeDescription(cfg *config.Serve) string {
	if cfg.DatabaseURL != "" {
		return "postgres " + config.RedactURL(cfg.DatabaseURL)
	}
	return "sqlite " + cfg.DB
}

// openingReason is what /readyz says while the store opens.
func openingReason(cfg *config.Serve) string {
	if cfg.DatabaseURL != "" {
		return "not ready: waiting for the database"
	}
	return "not ready: opening the store"
}

// errStoppedWaiting is openServeStore's error when serve is told to stop
// (SIGINT, SIGTERM) before the store is open.
var errStoppedWaiting = errors.New("stopped while opening the store")

// dbWaitPolicy spaces the attempts to open PostgreSQL within
// --database-wait: 1 s doubling to 10 s, +-10%.
var dbWaitPolicy = retry.Policy{Initial: time.Second, Multiplier: 2, MaxDelay: 10 * time.Second,
	Jitter: retry.JitterProportional, JitterFactor: 0.1}

// dbConnectTimeout bounds each attempt to reach PostgreSQL, so that a
// host that drops packets costs one attempt, not the whole wait.
const dbConnectTimeout = 10 * time.Second

// openPostgres opens the PostgreSQL store. While the database cannot be
// reached in a way that can heal by itself (see dbErrorHeals), it tries
// again, spaced by policy, for up to cfg.DatabaseWait, logging each
// failed attempt; other errors (authentication, a missing database, TLS)
// end it at once. It returns errStoppedWaiting when ctx ends first.
func openPostgres(ctx context.Context, cfg *config.Serve, log *slog.Logger, policy retry.Policy) (store.Store, error) {
	url := config.RedactURL(cfg.DatabaseURL)
	start := time.Now()
	deadline := start.Add(cfg.DatabaseWait)
	var prev time.Duration
	for attempt := 1; ; attempt++ {
		st, err := openPostgresOnce(ctx, cfg, log, deadline)
		if err == nil {
			if attempt > 1 {
				log.Info("database reachable", "database", url, "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, errStoppedWaiting
		}
		if !dbErrorHeals(err) {
			if cfg.DatabaseWait <= 0 {
				return nil, fmt.Errorf("database-url %s: %w", url, err)
			}
			return nil, fmt.Errorf("database-url %s: %w (not retried: waiting would not fix this)", url, err)
		}
		if cfg.DatabaseWait <= 0 {
			return nil, fmt.Errorf("database-url %s: %w (not retried: --database-wait is 0)", url, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			waited := time.Since(start).Round(time.Millisecond)
			log.Error("giving up on the database", "database", url, "attempts", attempt, "waited", waited.String(),
				"database_wait", cfg.DatabaseWait.String(), "error", err.Error())
			return nil, fmt.Errorf("database-url %s: not reachable within --database-wait %s ($REDRIVE_DATABASE_WAIT; %d attempts): %w",
				url, cfg.DatabaseWait, attempt, err)
		}
		delay := min(policy.Delay(attempt-1, prev, nil), left)
		prev = delay
		log.Warn("database not reachable yet, retrying", "database", url, "attempt", attempt, "error", err.Error(),
			"retry_in", delay.Round(time.Millisecond).String(), "wait_left", left.Round(time.Second).String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errStoppedWaiting
		case <-t.C:
		}
	}
}

// openPostgresOnce makes one attempt to open the store: a connection
// first, within dbConnectTimeout (or what is left of the wait, if more
// than a second), then postgres.Open, which migrates, bounded by ctx only.
func openPostgresOnce(ctx context.Context, cfg *config.Serve, log *slog.Logger, deadline time.Time) (store.Store, error) {
	pc, err := pgx.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "redrive"
	}
	probeCtx, cancel := context.WithTimeout(ctx, min(dbConnectTimeout, max(time.Until(deadline), time.Second)))
	conn, err := pgx.ConnectConfig(probeCtx, pc)
	cancel()
	if err != nil {
		return nil, err
	}
	_ = conn.Close(context.WithoutCancel(ctx))
	return postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Schema: cfg.Schema, Logger: log})
}

// dbErrorHeals reports whether an error opening PostgreSQL may go away by
// itself, so that trying again makes sense: the server is not reachable
// (refused, reset, timed out, unknown host yet, a closed connection) or
// says it cannot serve now (starting up, shutting down, in recovery, too
// many connections). What the server refuses for good (authentication, an
// unknown role or database, a missing permission), TLS failures and
// everything else do not heal.
func dbErrorHeals(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			pe.Code == "57P01", // admin_shutdown
			pe.Code == "57P02", // crash_shutdown
			pe.Code == "57P03", // cannot_connect_now: starting up, shutting down, in recovery
			pe.Code == "53300", // too_many_connections
			pe.Code == "40001", // serialization_failure
			pe.Code == "40P01": // deadlock_detected
			return true
		}
		return false
	}
	// TLS: a certificate refused on either side, a server that does not
	// speak TLS. crypto/tls reports alerts as net.OpError "remote error" or
	// "local error", which would otherwise pass for network errors.
	if oe, ok := errors.AsType[*net.OpError](err); ok && (oe.Op == "remote error" || oe.Op == "local error") {
		return false
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return false
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return false
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return false
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return false
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return false
	}
	// The network: refused, reset, timed out, no route, an unknown host
	// (a DNS name that appears once its container starts), a connection
	// closed by a proxy whose backend is not up yet.
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

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

// serveMux routes /metrics to Prometheus and everything else to the API.
// The metrics are the store's statistics, the breakers, the attempt
// histograms of the worker's observer, and the managed RabbitMQ queues'
// and kept Kafka topics' metrics.
func serveMux(api *server.Server, client *redrive.Client, breakers *breaker.Registry, attempts *metrics.Observer,
	managed server.Brokers, kept server.KafkaTopics, log *slog.Logger) http.Handler {
	reg := serveRegistry(client, breakers, attempts, log)
	registerBrokers(reg, managed)
	registerKafka(reg, kept)
	mux := http.NewServeMux()
	// The API's bearer token, through the API's throttle of wrong guesses.
	mux.Handle("/metrics", api.RequireToken(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError})))
	mux.Handle("/", api)
	return mux
}

// describeBudget words the retry budget for the start-up log.
func describeBudget(cfg *config.Serve) string {
	if cfg.NoBudget {
		return "off"
	}
	return fmt.Sprintf("%g of recent attempts, at least %d per %s", cfg.Budget.Ratio, cfg.Budget.MinRetries, cfg.Budget.Window)
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
