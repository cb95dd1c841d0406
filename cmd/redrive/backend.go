package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// Environment variables of the operator commands.
const (
	serverEnv = "REDRIVE_SERVER"
	tokenEnv  = "REDRIVE_TOKEN"
)

// connOptions say where an operator command works: on a server's REST API
// (--server) or directly on the store (--db or --database-url).
type connOptions struct {
	Server      string
	Token       string
	DatabaseURL string
	Schema      string
	// create lets the command create a missing SQLite database.
	create bool
}

// addConnFlags adds the connection flags to cmd.
func addConnFlags(cmd *cobra.Command, c *connOptions) {
	f := cmd.Flags()
	f.StringVar(&c.Server, "server", "", "URL of a redrive server's REST API (default $"+serverEnv+"; empty: open the store directly)")
	f.StringVar(&c.Token, "token", "", "bearer token of the server (default $"+tokenEnv+")")
	f.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL (default $"+databaseURLEnv+"; empty: the SQLite --db)")
	f.StringVar(&c.Schema, "schema", postgres.DefaultSchema, "PostgreSQL schema of the store")
}

// filterOptions are the DLQ filter flags.
type filterOptions struct {
	apiclient.FilterBody
}

func addFilterFlags(cmd *cobra.Command, fo *filterOptions) {
	f := cmd.Flags()
	f.StringVar(&fo.Queue, "queue", "", "only jobs of this queue")
	f.StringVar(&fo.Kind, "kind", "", "only jobs of this kind")
	f.StringVar(&fo.Class, "class", "", "only jobs whose last error has this class (transient, rate_limited, permanent, needs_auth, unknown)")
	f.StringVar(&fo.Reason, "reason", "", "only dead jobs with this reason (e.g. retries_exhausted)")
	f.StringVar(&fo.Fingerprint, "fingerprint", "", "only dead jobs of this cause (see dlq groups)")
	f.StringVar(&fo.Since, "since", "", "only jobs at or after this time: RFC 3339, or a duration back from now (30m, 1h, 7d)")
	f.StringVar(&fo.Until, "until", "", "only jobs before this time: RFC 3339, or a duration back from now (30m, 1h, 7d)")
	f.StringVar(&fo.Q, "error-contains", "", "only jobs whose last error contains this text (case-insensitive)")
}

// addErrorPrefixFlag adds --error-prefix to a command that reads jobs
// (a listing, groups): operations (redrive, purge, cancel, replay)
// refuse the filter, since they keep theirs in the store where a binary
// older than it would ignore it.
func addErrorPrefixFlag(cmd *cobra.Command, fo *filterOptions) {
	cmd.Flags().StringVar(&fo.ErrorPrefix, "error-prefix", "", "only jobs whose last error starts with this text (case-sensitive; indexed for dead jobs)")
}

func (fo *filterOptions) empty() bool { return fo.FilterBody == apiclient.FilterBody{} }

// describe words the filter's conditions as flag=value pairs, the value
// quoted when it needs to be: queue=mail error-contains="bad address".
// It is "" for the empty filter.
func (fo *filterOptions) describe() string {
	var parts []string
	for _, p := range []struct{ k, v string }{
		{"queue", fo.Queue}, {"kind", fo.Kind}, {"class", fo.Class}, {"reason", fo.Reason},
		{"fingerprint", fo.Fingerprint}, {"since", fo.Since}, {"until", fo.Until}, {"error-contains", fo.Q},
		{"error-prefix", fo.ErrorPrefix},
	} {
		if p.v != "" {
			parts = append(parts, p.k+"="+quoteIfNeeded(p.v))
		}
	}
	return strings.Join(parts, " ")
}

// toFilter validates the filter flags for direct mode.
func (fo *filterOptions) toFilter() (redrive.Filter, error) {
	f := redrive.Filter{Queue: fo.Queue, Kind: fo.Kind, Reason: fo.Reason, Fingerprint: fo.Fingerprint, ErrorContains: fo.Q,
		ErrorPrefix: fo.ErrorPrefix}
	if err := store.CheckErrorPrefix(fo.ErrorPrefix); err != nil {
		return f, fmt.Errorf("--error-prefix must be valid UTF-8 without NUL bytes, got %q", fo.ErrorPrefix)
	}
	if fo.Class != "" {
		c, err := failure.ParseClass(fo.Class)
		if err != nil {
			return f, fmt.Errorf("--class: unknown class %q (want unknown, transient, rate_limited, permanent or needs_auth)", fo.Class)
		}
		f.Class = c.String()
	}
	now := time.Now()
	var ok bool
	if fo.Since != "" {
		if f.Since, ok = server.ParseTime(fo.Since, now); !ok {
			return f, fmt.Errorf("--since must be an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration back from now such as 30m, 1h or 7d, got %q", fo.Since)
		}
	}
	if fo.Until != "" {
		if f.Until, ok = server.ParseTime(fo.Until, now); !ok {
			return f, fmt.Errorf("--until must be an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration back from now such as 30m, 1h or 7d, got %q", fo.Until)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, fmt.Errorf("--until (%s) must be after --since (%s)", fo.Until, fo.Since)
	}
	return f, nil
}

// wire is the filter as sent to a server: a relative since or until
// ("1h") becomes the RFC 3339 time it means now, so that a server older
// than this CLI understands it; anything else goes as typed, for the
// server to judge.
func (fo *filterOptions) wire() apiclient.FilterBody {
	b := fo.FilterBody
	now := time.Now()
	for _, p := range []*string{&b.Since, &b.Until} {
		if _, err := time.Parse(time.RFC3339Nano, *p); err == nil || *p == "" {
			continue
		}
		if t, ok := server.ParseTime(*p, now); ok {
			*p = t.UTC().Format(time.RFC3339Nano)
		}
	}
	return b
}

// listQuery is a listing request.
type listQuery struct {
	filterOptions
	States []string
	Limit  int
	Cursor string
	Dead   bool // the DLQ only
	// Match is --match, payload.FIELD=VALUE ("": none).
	Match string
}

// deadQuery is the listing of the dead jobs matching fo.
func deadQuery(fo filterOptions) listQuery {
	return listQuery{filterOptions: fo, Dead: true}
}

// redriveQuery is a redrive request: IDs, or a filter (All for every dead
// job).
type redriveQuery struct {
	IDs     []int64
	Filter  filterOptions
	All     bool
	Rate    float64
	Payload json.RawMessage
	Note    string
}

// purgeProgress reports a purge under way.
type purgeProgress struct {
	// Matched is how many dead jobs matched at the start.
	Matched int64
	Purged  int64
}

// backend is what the operator commands work on: a server's REST API
// (remoteBackend, on package apiclient) or the store itself
// (directBackend).
type backend interface {
	// Audit lists audit log entries, newest first (audit.go).
	Audit(ctx context.Context, q apiclient.AuditQuery) (apiclient.AuditList, error)
	Enqueue(ctx context.Context, in apiclient.EnqueueRequest) (*redrive.Job, error)
	Get(ctx context.Context, id int64) (*redrive.Job, error)
	List(ctx context.Context, q listQuery) (redrive.ListResult, error)
	Cancel(ctx context.Context, id int64) (*redrive.Job, error)
	// RunNow makes a scheduled job due at once (runnow.go).
	RunNow(ctx context.Context, id int64) (*redrive.Job, error)
	// SetPriority changes a waiting job's priority.
	SetPriority(ctx context.Context, id int64, priority int) (*redrive.Job, error)
	Stats(ctx context.Context) (redrive.Stats, error)
	Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error)
	// Redrive redrives dead jobs; progress, when not nil, is called as it
	// goes. When ctx ends midway it returns the progress so far and an
	// error (over the API, the server's operation is canceled first).
	Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error)
	// Purge deletes dead jobs, reporting progress as Redrive does.
	Purge(ctx context.Context, fo filterOptions, all bool, progress func(purgeProgress)) (int64, error)
	// PurgeIDs deletes the dead jobs among ids (the others are left as
	// they are) and returns how many it deleted.
	PurgeIDs(ctx context.Context, ids []int64) (int64, error)
	// Export writes dead jobs to dir; progress gets how many are written
	// and how many matched at the start (-1: unknown). Payloads the store
	// seals are written sealed unless decrypt.
	Export(ctx context.Context, dir string, fo filterOptions, decrypt bool, progress func(n int, total int64)) (int, error)
	// Count returns how many jobs List selects with q, over all its pages
	// (q's cursor and limit aside): with q.Dead, how many dead jobs a purge
	// or a redrive by the same filter would touch. It is -1 when a server
	// older than this CLI cannot count.
	Count(ctx context.Context, q listQuery) (int64, error)
	// Queues lists the queues; SetPaused pauses or resumes one (queues.go).
	Queues(ctx context.Context) ([]redrive.Queue, error)
	SetPaused(ctx context.Context, name string, paused bool) (redrive.Queue, error)
	// Workers lists the worker processes registered in the store
	// (workers.go).
	Workers(ctx context.Context) ([]redrive.WorkerStatus, error)
	// EnqueueBatch enqueues a batch of jobs at once (download.go).
	EnqueueBatch(ctx context.Context, reqs []apiclient.EnqueueRequest) ([]*redrive.Job, error)
	// Breakers lists the fleet's circuit breakers; ForceBreaker forces
	// one open for d (0: until closed), or closes it when open is false
	// (breakers.go).
	Breakers(ctx context.Context) ([]apiclient.BreakerView, error)
	// Limits lists the fleet's concurrency limits; ChangeLimit changes
	// one's max (0: no cap, for a limit with a rate), rate (a checked
	// rate; the zero one removes it; burst 0 keeps the limit's) and hold
	// on Retry-After, those ch gives, at once: all or none (limits.go).
	Limits(ctx context.Context) ([]store.LimitState, error)
	ChangeLimit(ctx context.Context, name string, ch store.LimitChange) (store.LimitState, error)
	ForceBreaker(ctx context.Context, name string, open bool, d time.Duration) (apiclient.BreakerView, error)
	// DeleteBreaker deletes a breaker's shared record, refused while it
	// is in use unless force (breakers.go).
	DeleteBreaker(ctx context.Context, name string, force bool) error
	// Schedules lists the periodic schedules; the others act on one
	// (periodic.go).
	Schedules(ctx context.Context) ([]redrive.ScheduleInfo, error)
	SetSchedulePaused(ctx context.Context, name string, paused bool) (redrive.ScheduleInfo, error)
	TriggerSchedule(ctx context.Context, name string) (*redrive.Job, error)
	DeleteSchedule(ctx context.Context, name string) error
	// Operations lists the durable operations, the newest first, from
	// before on; Operation reads one; SetOperation pauses, resumes or
	// cancels one (action "pause", "resume" or "cancel") (operations.go).
	Operations(ctx context.Context, before string, limit int) ([]apiclient.Operation, string, error)
	Operation(ctx context.Context, id string) (apiclient.Operation, error)
	SetOperation(ctx context.Context, id, action string) (apiclient.Operation, error)
	// Follow follows op until it ends (or, directly on the store, is
	// paused), calling report with each reading; directly on the store it
	// runs the operation itself when no worker holds it. cancelOnStop
	// cancels it when ctx ends first (Ctrl-C).
	Follow(ctx context.Context, op apiclient.Operation, cancelOnStop bool, report func(apiclient.Operation)) (apiclient.Operation, error)
	// CountReplay counts the jobs a replay by q would copy (-1: the
	// server counts as it runs); StartReplay starts the replay.
	CountReplay(ctx context.Context, q replayQuery) (int64, error)
	StartReplay(ctx context.Context, q replayQuery) (apiclient.Operation, error)
	// StartCancel starts a bulk cancel of pending and scheduled jobs
	// (jobs cancel --all, filters or ids).
	StartCancel(ctx context.Context, q cancelQuery) (apiclient.Operation, error)
	// Workflows lists the workflows with ids below before (0: from the
	// newest), newest first, and the before of the next page (0: none);
	// Workflow reads one with its jobs; CancelWorkflow cancels one;
	// EnqueueWorkflow enqueues one, read by server.DecodeWorkflow
	// (workflows.go).
	Workflows(ctx context.Context, before int64, limit int) ([]*redrive.WorkflowInfo, int64, error)
	Workflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error)
	CancelWorkflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error)
	EnqueueWorkflow(ctx context.Context, in apiclient.WorkflowRequest) (*redrive.WorkflowInfo, error)
	// EnqueueWorkflows enqueues many at once, read by
	// server.DecodeWorkflows.
	EnqueueWorkflows(ctx context.Context, in apiclient.WorkflowBatchRequest) ([]*redrive.WorkflowInfo, error)
	// AddToWorkflow adds jobs, read by server.DecodeWorkflowAdd, to an
	// open workflow.
	AddToWorkflow(ctx context.Context, id int64, in apiclient.WorkflowAddRequest) (*redrive.WorkflowInfo, error)
	Close() error
}

// replayQuery is a replay request: the flags, and the filter they make
// (Filter, with States and the payload match).
type replayQuery struct {
	Flags  filterOptions
	States []string
	Match  payloadMatch
	Filter redrive.Filter
	All    bool
	Batch  int
	Rate   float64
	Note   string
}

// cancelQuery is a bulk cancel request: IDs, or the flags and the
// filter they make (Filter, with States and the payload match).
type cancelQuery struct {
	IDs    []int64
	Flags  filterOptions
	States []string
	Match  payloadMatch
	Filter redrive.Filter
	All    bool
	Batch  int
	Rate   float64
	Note   string
}

// openBackend returns the backend the flags select.
func openBackend(ctx context.Context, g *globalOptions, cmd *cobra.Command, c *connOptions) (backend, error) {
	flags := cmd.Flags()
	if !flags.Changed("server") {
		c.Server = os.Getenv(serverEnv)
	}
	if !flags.Changed("token") {
		c.Token = os.Getenv(tokenEnv)
	}
	if !flags.Changed("database-url") {
		c.DatabaseURL = os.Getenv(databaseURLEnv)
	}
	if c.Server != "" {
		if flags.Changed("database-url") || cmd.Flag("db").Changed {
			return nil, flagErrorf(cmd, "give --server or the store (--db, --database-url), not both")
		}
		u, err := url.Parse(c.Server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, flagErrorf(cmd, "--server must be an http or https URL such as http://127.0.0.1:8080, got %q", c.Server)
		}
		// No per-request timeout: as on the store, the command's context
		// (Ctrl-C) bounds a request, and a count or a grouping on a large
		// store may take the server over apiclient's default minute.
		api, err := apiclient.New(c.Server, apiclient.WithToken(c.Token), apiclient.WithTimeout(0))
		if err != nil {
			return nil, flagErrorf(cmd, "%v", err)
		}
		return &remoteBackend{api: api}, nil
	}
	log := slog.New(slog.DiscardHandler)
	payloads, err := config.PayloadCodecFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	if c.DatabaseURL != "" {
		// Only migrate and serve create or migrate a schema: a command
		// given a mistyped --schema must not create it.
		st, err := postgres.Open(ctx, c.DatabaseURL, postgres.Options{Schema: c.Schema, Logger: log, SkipMigrate: true, Payloads: payloads})
		if err != nil {
			return nil, fmt.Errorf("database-url %s: %w", redactURL(c.DatabaseURL), unmigratedError(ctx, c.DatabaseURL, c.Schema, err))
		}
		return &directBackend{c: directClient(st, log), close: st.Close}, nil
	}
	if _, err := os.Stat(g.DB); err != nil && !c.create {
		return nil, fmt.Errorf("db %s: %w (give --db, --database-url or --server)", g.DB, err)
	}
	// A command that only reads opens the database read-only: it then
	// works on a read-only copy or mount, and migrates nothing.
	readOnly := cmd.Annotations[readOnlyAnnotation] == "true"
	st, err := sqlite.Open(ctx, g.DB, sqlite.Options{Logger: log, ReadOnly: readOnly, Payloads: payloads})
	if err != nil {
		return nil, fmt.Errorf("db %s: %w", g.DB, err)
	}
	return &directBackend{c: directClient(st, log), close: st.Close}, nil
}

// unmigratedError words the failure err of opening schema without
// migrating it: the schema does not exist, or lacks migrations, and
// `redrive migrate` is the remedy. Any other error is returned as is.
func unmigratedError(ctx context.Context, dbURL, schema string, err error) error {
	conn, cerr := pgx.Connect(ctx, dbURL)
	if cerr != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists) != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("schema %s does not exist (run redrive migrate)", schema)
	}
	if strings.Contains(err.Error(), "(run Migrate)") {
		return fmt.Errorf("schema %s is not migrated to this version of redrive (run redrive migrate): %w", schema, err)
	}
	return err
}

// isNotFound reports whether err says that a job does not exist, from
// the store or from the API (404).
func isNotFound(err error) bool {
	return apiclient.IsNotFound(err) || errors.Is(err, store.ErrNotFound)
}

// redriveProgress converts a redrive operation to the Client's progress.
func redriveProgress(op apiclient.Operation) redrive.RedriveProgress {
	p := redrive.RedriveProgress{Matched: op.Matched, Redriven: op.Redriven, Refused: op.Refused, Skipped: op.Skipped,
		Unblocks: op.Unblocks, Done: op.State == server.OperationDone}
	if len(op.RefusedIDs) > 0 {
		p.Refusals = op.RefusedIDs
	}
	return p
}
