package main

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/server"
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
topic's offsets per retry tier and DLT (an upper bound on its records), the
DLT's dead letters (counted), the lag of --kafka-group and the keeper's
totals. Do not also redrive these DLTs with
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
throttled per client: 5, then one every 12 s. --tokens (or $REDRIVE_TOKENS,
or the file's "tokens" object) adds named tokens, each with a role: read,
worker, operate or admin (--token's is an admin named admin); "redrive token new"
makes one and prints the line to configure. See docs/security.md. Without a token, on loopback, no web page can drive it: JSON
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

// runServe serves until ctx ends, then shuts down gracefully. Logs go to
// logOut in cfg.LogFormat (JSON unless logOut is a terminal or text is
// asked for). ready, when not nil, is called with the address listened
// on once the server accepts connections. Its steps: check the listen
// address and token, listen (answering 503 while the store opens), open
// the store, build the worker and the broker transports, serve the API,
// then run until told to stop (serve_run.go).
func runServe(ctx context.Context, cfg *config.Serve, logOut io.Writer, ready func(net.Addr)) error {
	allowed, err := checkListen(cfg)
	if err != nil {
		return err
	}
	log := serveLogger(cfg, logOut)
	front, err := listen(cfg, log)
	if err != nil {
		return err
	}
	front.handler.set(server.HostGuard(allowed, startingHandler(openingReason(cfg))))
	front.start()
	log.Info("redrive starting: opening the store", "addr", front.addr().String(), "store", storeDescription(cfg))

	st, target, err := openServeStore(ctx, cfg, log)
	if err != nil {
		return front.abort(ctx, cfg, log, err)
	}
	defer st.Close()

	// A failure from here on stops the server too (front.abort), before
	// the deferred st.Close.
	tp, stopTracing, err := serveTracing(ctx, log)
	if err != nil {
		return front.abort(ctx, cfg, log, err)
	}
	defer func() {
		if err := stopTracing(ctx); err != nil {
			log.Warn("tracing: spans lost at shutdown", "error", err)
		}
	}()
	eng, err := newEngine(cfg, st, log, tp)
	if err != nil {
		return front.abort(ctx, cfg, log, err)
	}
	if err := eng.openTransports(cfg, log); err != nil {
		return front.abort(ctx, cfg, log, err)
	}
	// The API's operations (bulk redrives, purges) run on ctx: SIGINT or
	// SIGTERM cancels them, and api.Close in shutdown waits for them to
	// stop before the store closes.
	api := server.New(server.Options{Client: eng.client, Breakers: eng.worker.Breakers(), Token: cfg.Token, Tokens: cfg.Tokens, Logger: log, Context: ctx,
		ExportDir: cfg.ExportDir, TraceURLTemplate: cfg.TraceURLTemplate,
		RedactHeaders: cfg.RedactHeaders, RedactFields: cfg.RedactFields, AllowedHosts: allowed, TrustedProxies: cfg.TrustedProxies, Brokers: eng.managed, Kafka: eng.kept,
		Workers: eng.remote})
	front.handler.set(server.HostGuard(allowed, serveMux(api, eng.client, eng.worker.Breakers(), eng.attempts, eng.managed, eng.kept, log)))

	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	eng.start(workerCtx, cfg, log)
	logServing(cfg, log, front.addr(), target, allowed, logOut)
	if ready != nil {
		ready(front.addr())
	}
	serveErr := waitForStop(ctx, cfg, log, front, eng)
	return shutdown(ctx, cfg, log, serveErr, api, front, eng, stopWorker)
}
