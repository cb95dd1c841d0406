package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/httpjob"
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
	server.FilterBody
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

func (fo *filterOptions) empty() bool { return fo.FilterBody == server.FilterBody{} }

// describe words the filter's conditions as flag=value pairs, the value
// quoted when it needs to be: queue=mail error-contains="bad address".
// It is "" for the empty filter.
func (fo *filterOptions) describe() string {
	var parts []string
	for _, p := range []struct{ k, v string }{
		{"queue", fo.Queue}, {"kind", fo.Kind}, {"class", fo.Class}, {"reason", fo.Reason},
		{"fingerprint", fo.Fingerprint}, {"since", fo.Since}, {"until", fo.Until}, {"error-contains", fo.Q},
	} {
		if p.v != "" {
			parts = append(parts, p.k+"="+quoteIfNeeded(p.v))
		}
	}
	return strings.Join(parts, " ")
}

// toFilter validates the filter flags for direct mode.
func (fo *filterOptions) toFilter() (redrive.Filter, error) {
	f := redrive.Filter{Queue: fo.Queue, Kind: fo.Kind, Reason: fo.Reason, Fingerprint: fo.Fingerprint, ErrorContains: fo.Q}
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

// values adds the filter to query parameters.
func (fo *filterOptions) values(v url.Values) {
	wire := fo.wire()
	for _, p := range []struct{ k, v string }{
		{"queue", wire.Queue}, {"kind", wire.Kind}, {"class", wire.Class}, {"reason", wire.Reason},
		{"fingerprint", wire.Fingerprint}, {"since", wire.Since}, {"until", wire.Until}, {"q", wire.Q},
	} {
		if p.v != "" {
			v.Set(p.k, p.v)
		}
	}
}

// wire is the filter as sent to a server: a relative since or until
// ("1h") becomes the RFC 3339 time it means now, so that a server older
// than this CLI understands it; anything else goes as typed, for the
// server to judge.
func (fo *filterOptions) wire() server.FilterBody {
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

// backend is what the operator commands work on: the REST API or the
// store itself.
type backend interface {
	Enqueue(ctx context.Context, in server.EnqueueRequest) (*redrive.Job, error)
	Get(ctx context.Context, id int64) (*redrive.Job, error)
	List(ctx context.Context, q listQuery) (redrive.ListResult, error)
	Cancel(ctx context.Context, id int64) (*redrive.Job, error)
	Stats(ctx context.Context) (redrive.Stats, error)
	Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error)
	// Redrive redrives dead jobs; progress, when not nil, is called as it
	// goes. When ctx ends midway it returns the progress so far and an
	// error (over the API, the server's operation is canceled first).
	Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error)
	// Purge deletes dead jobs, reporting progress as Redrive does.
	Purge(ctx context.Context, fo filterOptions, all bool, progress func(purgeProgress)) (int64, error)
	// Export writes dead jobs to dir; progress gets how many are written
	// and how many matched at the start (-1: unknown).
	Export(ctx context.Context, dir string, fo filterOptions, progress func(n int, total int64)) (int, error)
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
	Close() error
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
		return &httpBackend{base: u, token: c.Token, hc: &http.Client{}}, nil
	}
	log := slog.New(slog.DiscardHandler)
	if c.DatabaseURL != "" {
		// Only migrate and serve create or migrate a schema: a command
		// given a mistyped --schema must not create it.
		st, err := postgres.Open(ctx, c.DatabaseURL, postgres.Options{Schema: c.Schema, Logger: log, SkipMigrate: true})
		if err != nil {
			return nil, fmt.Errorf("database-url %s: %w", redactURL(c.DatabaseURL), unmigratedError(ctx, c.DatabaseURL, c.Schema, err))
		}
		return &directBackend{c: directClient(st, log), close: st.Close}, nil
	}
	if _, err := os.Stat(g.DB); err != nil && !c.create {
		return nil, fmt.Errorf("db %s: %w (give --db, --database-url or --server)", g.DB, err)
	}
	st, err := sqlite.Open(ctx, g.DB, sqlite.Options{Logger: log})
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

// directClient is the client of the direct mode: it checks the payloads
// of http jobs as serve does (with the http kind's default guard).
func directClient(st store.Store, log *slog.Logger) *redrive.Client {
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	c.SetValidator(httpjob.Kind, httpValidator)
	return c
}

// directBackend works on the store with a redrive.Client.
type directBackend struct {
	c     *redrive.Client
	close func() error
}

func (d *directBackend) Close() error { return d.close() }

func (d *directBackend) Enqueue(ctx context.Context, in server.EnqueueRequest) (*redrive.Job, error) {
	var opts []redrive.Option
	if in.Queue != "" {
		opts = append(opts, redrive.InQueue(in.Queue))
	}
	if in.Delay != "" {
		dl, err := time.ParseDuration(in.Delay)
		if err != nil {
			return nil, err
		}
		opts = append(opts, redrive.After(dl))
	}
	if in.MaxRetries != nil {
		opts = append(opts, redrive.MaxRetries(*in.MaxRetries))
	}
	if in.IdempotencyKey != "" {
		opts = append(opts, redrive.IdempotencyKey(in.IdempotencyKey))
	}
	if in.ReturnExisting {
		opts = append(opts, redrive.ReturnExisting())
	}
	var payload any
	if len(in.Payload) > 0 {
		payload = in.Payload
	}
	return d.c.Enqueue(ctx, in.Kind, payload, opts...)
}

func (d *directBackend) Get(ctx context.Context, id int64) (*redrive.Job, error) {
	j, err := d.c.Get(ctx, id)
	return j, jobError(id, err)
}

// jobError words a store's error about job id as the API does, without
// the store's name ("sqlite: job 7: job not found" is "job 7 not found");
// errors.Is still finds the store's error.
func jobError(id int64, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &jobErr{msg: fmt.Sprintf("job %d not found", id), err: err}
	case errors.Is(err, store.ErrConflict):
		return &jobErr{msg: fmt.Sprintf("job %d: its state does not allow this", id), err: err}
	}
	return err
}

// jobErr is an error about one job, worded for the operator.
type jobErr struct {
	msg string
	err error
}

func (e *jobErr) Error() string { return e.msg }
func (e *jobErr) Unwrap() error { return e.err }

// isNotFound reports whether err says that a job does not exist, from
// the store or from the API (404).
func isNotFound(err error) bool {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae.Status == http.StatusNotFound
	}
	return errors.Is(err, store.ErrNotFound)
}

// filter validates a listing's flags for direct mode.
func (q *listQuery) filter() (redrive.Filter, error) {
	f, err := q.toFilter()
	if err != nil {
		return f, err
	}
	if q.Dead {
		f.States = []redrive.State{redrive.Dead}
		return f, nil
	}
	for _, s := range q.States {
		st, err := store.ParseState(strings.TrimSpace(s))
		if err != nil {
			return f, fmt.Errorf("--state: unknown state %q (want pending, scheduled, running, completed, dead or canceled)", s)
		}
		f.States = append(f.States, st)
	}
	return f, nil
}

func (d *directBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	f, err := q.filter()
	if err != nil {
		return redrive.ListResult{}, err
	}
	return d.c.List(ctx, f, redrive.Page{Cursor: q.Cursor, Limit: q.Limit})
}

// Count counts what List selects, over all its pages.
func (d *directBackend) Count(ctx context.Context, q listQuery) (int64, error) {
	f, err := q.filter()
	if err != nil {
		return 0, err
	}
	return d.c.Count(ctx, f)
}

func (d *directBackend) Cancel(ctx context.Context, id int64) (*redrive.Job, error) {
	j, err := d.c.Cancel(ctx, id)
	if errors.Is(err, store.ErrConflict) {
		if cur, gerr := d.c.Get(ctx, id); gerr == nil {
			return nil, &jobErr{msg: fmt.Sprintf("job %d is %s: it cannot be canceled", id, cur.State), err: err}
		}
	}
	return j, jobError(id, err)
}

func (d *directBackend) Stats(ctx context.Context) (redrive.Stats, error) { return d.c.Stats(ctx) }

func (d *directBackend) Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error) {
	f, err := fo.toFilter()
	if err != nil {
		return nil, err
	}
	return d.c.DeadGroups(ctx, f, limit)
}

// Redrive runs a redrive operation on the store (see runDirect).
func (d *directBackend) Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	req := redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: q.IDs, Rate: q.Rate, Note: q.Note}
	if len(q.Payload) > 0 {
		req.Payload = q.Payload
	}
	if len(q.IDs) == 0 {
		f, err := q.Filter.toFilter()
		if err != nil {
			return redrive.RedriveProgress{}, err
		}
		req.Filter = f
	}
	op, err := runDirect(ctx, d, req, func(op server.Operation) {
		if progress != nil {
			progress(redriveProgress(op))
		}
	})
	return redriveProgress(op), err
}

// Purge runs a purge operation on the store (see runDirect).
func (d *directBackend) Purge(ctx context.Context, fo filterOptions, _ bool, progress func(purgeProgress)) (int64, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	op, err := runDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationPurge, Filter: f}, func(op server.Operation) {
		if progress != nil {
			progress(purgeProgress{Matched: op.Matched, Purged: op.Purged})
		}
	})
	return op.Purged, err
}

func (d *directBackend) Export(ctx context.Context, dir string, fo filterOptions, progress func(int, int64)) (int, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	var report func(int)
	if progress != nil {
		total, err := d.Count(ctx, deadQuery(fo))
		if err != nil {
			return 0, err
		}
		progress(0, total)
		report = func(n int) { progress(n, total) }
	}
	return d.c.Export(ctx, dir, f, report)
}

// apiError is an error answered by the REST API.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("server: %s (HTTP %d %s", e.Message, e.Status, e.Code)
	if e.Field != "" {
		s += ", field " + e.Field
	}
	return s + ")"
}

// httpBackend works on a server's REST API.
type httpBackend struct {
	base  *url.URL
	token string
	hc    *http.Client
}

func (h *httpBackend) Close() error { return nil }

// send sends a request and returns a 2xx answer, whose body the caller
// closes; any other status is returned as an *apiError.
func (h *httpBackend) send(ctx context.Context, method, path string, q url.Values, body any, accept string) (*http.Response, error) {
	u := h.base.JoinPath(path)
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("server: read the answer to %s %s: %w", method, u.Path, err)
	}
	var eb struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(data, &eb) == nil && eb.Error != nil && eb.Error.Message != "" {
		eb.Error.Status = resp.StatusCode
		return nil, eb.Error
	}
	snippet := strings.TrimSpace(string(data))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "..."
	}
	return nil, &apiError{Status: resp.StatusCode, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_")),
		Message: fmt.Sprintf("%s %s answered %q", method, u.Path, snippet)}
}

// do sends a request and decodes a 2xx answer into out.
func (h *httpBackend) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := h.send(ctx, method, path, q, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("server: read the answer to %s %s: %w", method, path, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("server: malformed answer to %s %s: %w", method, path, err)
	}
	return nil
}

func (h *httpBackend) Enqueue(ctx context.Context, in server.EnqueueRequest) (*redrive.Job, error) {
	var j redrive.Job
	return &j, h.do(ctx, http.MethodPost, "/v1/jobs", nil, in, &j)
}

func (h *httpBackend) Get(ctx context.Context, id int64) (*redrive.Job, error) {
	var j redrive.Job
	return &j, h.do(ctx, http.MethodGet, "/v1/jobs/"+strconv.FormatInt(id, 10), nil, nil, &j)
}

// listing returns the path and the filter parameters of a listing.
func (q *listQuery) listing() (string, url.Values) {
	v := url.Values{}
	q.values(v)
	if q.Dead {
		return "/v1/dlq", v
	}
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	return "/v1/jobs", v
}

func (h *httpBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	path, v := q.listing()
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	var res redrive.ListResult
	return res, h.do(ctx, http.MethodGet, path, v, nil, &res)
}

func (h *httpBackend) Cancel(ctx context.Context, id int64) (*redrive.Job, error) {
	var j redrive.Job
	return &j, h.do(ctx, http.MethodPost, "/v1/jobs/"+strconv.FormatInt(id, 10)+"/cancel", nil, nil, &j)
}

func (h *httpBackend) Stats(ctx context.Context) (redrive.Stats, error) {
	var s redrive.Stats
	return s, h.do(ctx, http.MethodGet, "/v1/stats", nil, nil, &s)
}

func (h *httpBackend) Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error) {
	v := url.Values{}
	fo.values(v)
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var res struct {
		Groups []redrive.Group `json:"groups"`
	}
	return res.Groups, h.do(ctx, http.MethodGet, "/v1/dlq/groups", v, nil, &res)
}

// Count asks GET /v1/jobs/count or GET /v1/dlq/count. A server older
// than the count routes answers GET /v1/dlq/count with 404 and GET
// /v1/jobs/count as the job "count" (400, field id): the count is then
// unknown (-1), not an error.
func (h *httpBackend) Count(ctx context.Context, q listQuery) (int64, error) {
	path, v := q.listing()
	var res server.CountResponse
	err := h.do(ctx, http.MethodGet, path+"/count", v, nil, &res)
	if ae, ok := errors.AsType[*apiError](err); ok &&
		(ae.Status == http.StatusNotFound || (ae.Status == http.StatusBadRequest && ae.Field == "id")) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	return res.Count, nil
}

// operationBody is the server's answer about one operation.
type operationBody struct {
	Operation server.Operation `json:"operation"`
}

// pollEvery is how often the CLI reads a server operation's progress.
var pollEvery = 200 * time.Millisecond

// follow polls the operation the server started until it ends, calling
// report with each state read. When ctx ends first (Ctrl-C), it cancels
// the operation on the server (what was done stays done) and returns its
// final state with ctx's error. An operation that failed or was canceled
// by someone else is an error too.
func (h *httpBackend) follow(ctx context.Context, op server.Operation, report func(server.Operation)) (server.Operation, error) {
	path := "/v1/operations/" + url.PathEscape(op.ID)
	report(op)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for !op.State.Final() {
		select {
		case <-ctx.Done():
			final, err := h.cancelOperation(ctx, path)
			if err != nil {
				return op, fmt.Errorf("%w; canceling operation %s on the server failed: %w", ctx.Err(), op.ID, err)
			}
			report(final)
			return final, fmt.Errorf("%w: operation %s %s on the server", ctx.Err(), op.ID, final.State)
		case <-t.C:
		}
		var ob operationBody
		if err := h.do(ctx, http.MethodGet, path, nil, nil, &ob); err != nil {
			if ctx.Err() != nil {
				continue // canceled meanwhile: the next turn cancels the operation
			}
			return op, fmt.Errorf("follow operation %s: %w", op.ID, err)
		}
		op = ob.Operation
		report(op)
	}
	switch op.State {
	case server.OperationDone:
		return op, nil
	case server.OperationFailed:
		return op, fmt.Errorf("server: operation %s failed: %s", op.ID, op.Error)
	default:
		return op, fmt.Errorf("server: operation %s %s: %s", op.ID, op.State, op.Error)
	}
}

// cancelOperation cancels the operation at path after ctx has ended, and
// returns its final state.
func (h *httpBackend) cancelOperation(ctx context.Context, path string) (server.Operation, error) {
	// A context of its own: ctx is over, and the cancel must still go.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var ob operationBody
	err := h.do(cctx, http.MethodDelete, path, nil, nil, &ob)
	if ae, ok := errors.AsType[*apiError](err); ok && ae.Status == http.StatusConflict {
		// It ended meanwhile.
		err = h.do(cctx, http.MethodGet, path, nil, nil, &ob)
	}
	return ob.Operation, err
}

// redriveProgress converts a redrive operation to the Client's progress.
func redriveProgress(op server.Operation) redrive.RedriveProgress {
	p := redrive.RedriveProgress{Matched: op.Matched, Redriven: op.Redriven, Refused: op.Refused, Skipped: op.Skipped,
		Done: op.State == server.OperationDone}
	if len(op.RefusedIDs) > 0 {
		p.Refusals = op.RefusedIDs
	}
	return p
}

// Redrive starts a redrive operation on the server and follows it.
func (h *httpBackend) Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	body := server.RedriveBody{IDs: q.IDs, Rate: q.Rate, Payload: q.Payload, Note: q.Note}
	if len(q.IDs) == 0 {
		if q.Filter.empty() {
			body.All = true
		} else {
			fb := q.Filter.wire()
			body.Filter = &fb
		}
	}
	var ob operationBody
	if err := h.do(ctx, http.MethodPost, "/v1/dlq/redrive", nil, body, &ob); err != nil {
		return redrive.RedriveProgress{}, err
	}
	op, err := h.follow(ctx, ob.Operation, func(op server.Operation) {
		if progress != nil {
			progress(redriveProgress(op))
		}
	})
	return redriveProgress(op), err
}

// Purge starts a purge operation on the server and follows it.
func (h *httpBackend) Purge(ctx context.Context, fo filterOptions, all bool, progress func(purgeProgress)) (int64, error) {
	v := url.Values{}
	fo.values(v)
	if all {
		v.Set("all", "true")
	}
	var ob operationBody
	if err := h.do(ctx, http.MethodDelete, "/v1/dlq", v, nil, &ob); err != nil {
		return 0, err
	}
	op, err := h.follow(ctx, ob.Operation, func(op server.Operation) {
		if progress != nil {
			progress(purgeProgress{Matched: op.Matched, Purged: op.Purged})
		}
	})
	return op.Purged, err
}

// Export reads GET /v1/dlq/export (NDJSON, one job a line) and writes
// each job's folder as redrive.Client.Export does.
func (h *httpBackend) Export(ctx context.Context, dir string, fo filterOptions, progress func(int, int64)) (int, error) {
	if dir == "" {
		return 0, errors.New("export: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	v := url.Values{}
	fo.values(v)
	resp, err := h.send(ctx, http.MethodGet, "/v1/dlq/export", v, nil, "application/x-ndjson")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		return 0, fmt.Errorf("server: GET /v1/dlq/export answered %q, not application/x-ndjson (is the server older than this CLI?)", ct)
	}
	total := int64(-1)
	if n, err := strconv.ParseInt(resp.Header.Get("X-Total-Count"), 10, 64); err == nil && n >= 0 {
		total = n
	}
	if progress != nil {
		progress(0, total)
	}
	dec := json.NewDecoder(resp.Body)
	n := 0
	for {
		var line server.ExportLine
		err := dec.Decode(&line)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("server: export stream cut after %d job(s): %w", n, err)
		}
		if line.Job == nil || line.Job.ID <= 0 {
			return n, fmt.Errorf("server: export line %d holds no job", n+1)
		}
		if err := redrive.ExportJob(dir, line.Job); err != nil {
			return n, fmt.Errorf("export job %d: %w", line.Job.ID, err)
		}
		n++
		if progress != nil {
			progress(n, total)
		}
	}
}

// httpValidator is the http kind's payload check with its default guard.
var httpValidator = httpjob.New(httpjob.Options{AllowLinkLocalSetting: "serve --http-allow-link-local",
	AllowPrivateSetting: "serve --http-allow-private"}).Validate
