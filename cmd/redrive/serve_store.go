package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

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
	st, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Logger: log, Payloads: cfg.PayloadCodec(), Synchronous: cfg.SQLiteSynchronous})
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", errStoppedWaiting
		}
		return nil, "", fmt.Errorf("db %s: %w", cfg.DB, err)
	}
	desc := storeDescription(cfg)
	if mode := st.Synchronous(); mode != "full" {
		desc += " (synchronous=" + mode + ")"
	}
	return st, desc, nil
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
	return postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Schema: cfg.Schema, Logger: log, Payloads: cfg.PayloadCodec()})
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
