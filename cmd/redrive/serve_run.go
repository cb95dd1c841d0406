package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/server"
)

// logServing logs that serve is up, with its settings, and where the
// dashboard is; on a terminal it says so in plain words too.
func logServing(cfg *config.Serve, log *slog.Logger, addr net.Addr, target string, allowed []string, logOut io.Writer) {
	queueRetry := map[string]string{}
	for q, p := range cfg.QueueRetry {
		queueRetry[q] = config.DescribePolicy(p)
	}
	hosts := "any (the token guards the server)"
	if len(allowed) > 0 {
		hosts = strings.Join(allowed, ", ")
	}
	log.Info("redrive serving", "addr", addr.String(), "store", target, "queues", cfg.Queues,
		"auth", cfg.Token != "" || len(cfg.Tokens) > 0, "tokens", len(cfg.Tokens), "allowed_hosts", hosts, "http_allow_private", cfg.HTTPAllowPrivate,
		"http_allow_link_local", cfg.HTTPAllowLinkLocal, "download_dir", describeDownloadDir(cfg), "retry", config.DescribePolicy(cfg.Retry), "queue_retry", queueRetry,
		"lease", cfg.Lease.String(), "completed_retention", cfg.CompletedRetention.String(), "dlq_max_age", cfg.DLQMaxAge.String(),
		"key_retention", cfg.KeyRetention.String(), "retry_budget", describeBudget(cfg))
	dashboard := dashboardURL(addr)
	log.Info("dashboard: "+dashboard, "url", dashboard)
	if isTerminal(logOut) {
		fmt.Fprintf(logOut, "\n  redrive is running: dashboard %s  (Ctrl-C stops it)\n\n", dashboard)
	}
}

// waitForStop waits until ctx ends (nil) or a part of serve stops on its
// own (its error).
func waitForStop(ctx context.Context, cfg *config.Serve, log *slog.Logger, front *frontDoor, e *engine) error {
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	case serveErr = <-front.done:
		log.Error("HTTP server stopped", "error", serveErr)
	case err := <-e.workerDone:
		// Run only returns early on a programming error.
		log.Error("worker stopped", "error", err)
		serveErr = fmt.Errorf("worker stopped: %v", err)
		e.workerDone <- err
	case err := <-e.brokerDone:
		serveErr = fmt.Errorf("amqp: %w", err)
	case err := <-e.kafkaDone:
		serveErr = fmt.Errorf("kafka: %w", err)
	}
	return serveErr
}

// shutdown stops serve gracefully and returns serveErr, or the worker's
// error. It cancels the API's operations and waits for them (they stop at
// their next store call or pacing wait), so that requests waiting on one
// (wait=true) get its final state; then stops taking requests, and lets
// running ones finish, while the worker (stopWorker) stops fetching and
// lets its handlers finish: both within the shutdown timeout.
func shutdown(ctx context.Context, cfg *config.Serve, log *slog.Logger, serveErr error, api *server.Server,
	front *frontDoor, e *engine, stopWorker context.CancelFunc) error {
	_ = api.Close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := front.srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("HTTP shutdown: closing the remaining connections", "error", err)
			front.srv.Close()
		}
	})
	stopWorker()
	<-e.remoteDone // its long-polls answered at once
	if err := <-e.workerDone; err != nil && serveErr == nil {
		serveErr = err
	}
	e.stopTransports()
	wg.Wait()
	log.Info("redrive stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}
