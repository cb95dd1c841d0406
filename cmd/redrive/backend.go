package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
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
	f.StringVar(&fo.Since, "since", "", "only jobs at or after this RFC 3339 time")
	f.StringVar(&fo.Until, "until", "", "only jobs before this RFC 3339 time")
	f.StringVar(&fo.Q, "error-contains", "", "only jobs whose last error contains this text (case-insensitive)")
}

func (fo *filterOptions) empty() bool { return fo.FilterBody == server.FilterBody{} }

// describe words the filter for a confirmation prompt.
func (fo *filterOptions) describe() string {
	var parts []string
	for _, p := range []struct{ k, v string }{
		{"queue", fo.Queue}, {"kind", fo.Kind}, {"class", fo.Class}, {"reason", fo.Reason},
		{"fingerprint", fo.Fingerprint}, {"since", fo.Since}, {"until", fo.Until}, {"error-contains", fo.Q},
	} {
		if p.v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", p.k, p.v))
		}
	}
	if len(parts) == 0 {
		return "every dead job"
	}
	return "the dead jobs matching " + strings.Join(parts, " ")
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
	var err error
	if fo.Since != "" {
		if f.Since, err = time.Parse(time.RFC3339Nano, fo.Since); err != nil {
			return f, fmt.Errorf("--since must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", fo.Since)
		}
	}
	if fo.Until != "" {
		if f.Until, err = time.Parse(time.RFC3339Nano, fo.Until); err != nil {
			return f, fmt.Errorf("--until must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", fo.Until)
		}
	}
	return f, nil
}

// values adds the filter to query parameters.
func (fo *filterOptions) values(v url.Values) {
	for _, p := range []struct{ k, v string }{
		{"queue", fo.Queue}, {"kind", fo.Kind}, {"class", fo.Class}, {"reason", fo.Reason},
		{"fingerprint", fo.Fingerprint}, {"since", fo.Since}, {"until", fo.Until}, {"q", fo.Q},
	} {
		if p.v != "" {
			v.Set(p.k, p.v)
		}
	}
}

// listQuery is a listing request.
type listQuery struct {
	filterOptions
	States []string
	Limit  int
	Cursor string
	Dead   bool // the DLQ only
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

// backend is what the operator commands work on: the REST API or the
// store itself.
type backend interface {
	Enqueue(ctx context.Context, in server.EnqueueRequest) (*redrive.Job, error)
	Get(ctx context.Context, id int64) (*redrive.Job, error)
	List(ctx context.Context, q listQuery) (redrive.ListResult, error)
	Cancel(ctx context.Context, id int64) (*redrive.Job, error)
	Stats(ctx context.Context) (redrive.Stats, error)
	Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error)
	Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error)
	Purge(ctx context.Context, fo filterOptions, all bool) (int64, error)
	Export(ctx context.Context, dir string, fo filterOptions, progress func(int)) (int, error)
	// Count returns how many dead jobs match, or -1 when unknown.
	Count(ctx context.Context, fo filterOptions) (int64, error)
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
		st, err := postgres.Open(ctx, c.DatabaseURL, postgres.Options{Schema: c.Schema, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("database-url %s: %w", redactURL(c.DatabaseURL), err)
		}
		return &directBackend{c: redrive.NewClient(st, redrive.ClientOptions{Logger: log}), close: st.Close}, nil
	}
	if _, err := os.Stat(g.DB); err != nil && !c.create {
		return nil, fmt.Errorf("db %s: %w (give --db, --database-url or --server)", g.DB, err)
	}
	st, err := sqlite.Open(ctx, g.DB, sqlite.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("db %s: %w", g.DB, err)
	}
	return &directBackend{c: redrive.NewClient(st, redrive.ClientOptions{Logger: log}), close: st.Close}, nil
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
	var payload any
	if len(in.Payload) > 0 {
		payload = in.Payload
	}
	return d.c.Enqueue(ctx, in.Kind, payload, opts...)
}

func (d *directBackend) Get(ctx context.Context, id int64) (*redrive.Job, error) {
	return d.c.Get(ctx, id)
}

func (d *directBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	f, err := q.toFilter()
	if err != nil {
		return redrive.ListResult{}, err
	}
	if q.Dead {
		f.States = []redrive.State{redrive.Dead}
	} else {
		for _, s := range q.States {
			st, err := store.ParseState(strings.TrimSpace(s))
			if err != nil {
				return redrive.ListResult{}, fmt.Errorf("--state: unknown state %q (want pending, scheduled, running, completed, dead or canceled)", s)
			}
			f.States = append(f.States, st)
		}
	}
	return d.c.List(ctx, f, redrive.Page{Cursor: q.Cursor, Limit: q.Limit})
}

func (d *directBackend) Cancel(ctx context.Context, id int64) (*redrive.Job, error) {
	return d.c.Cancel(ctx, id)
}

func (d *directBackend) Stats(ctx context.Context) (redrive.Stats, error) { return d.c.Stats(ctx) }

func (d *directBackend) Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error) {
	f, err := fo.toFilter()
	if err != nil {
		return nil, err
	}
	return d.c.DeadGroups(ctx, f, limit)
}

func (d *directBackend) Count(ctx context.Context, fo filterOptions) (int64, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	f.States = []redrive.State{redrive.Dead}
	return d.c.Count(ctx, f)
}

func (d *directBackend) Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	req := redrive.RedriveRequest{IDs: q.IDs, Rate: q.Rate, Note: q.Note, Progress: progress}
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
	return d.c.Redrive(ctx, req)
}

func (d *directBackend) Purge(ctx context.Context, fo filterOptions, _ bool) (int64, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	return d.c.Purge(ctx, f)
}

func (d *directBackend) Export(ctx context.Context, dir string, fo filterOptions, progress func(int)) (int, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	return d.c.Export(ctx, dir, f, progress)
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

// do sends a request and decodes a 2xx answer into out.
func (h *httpBackend) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	u := h.base.JoinPath(path)
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("server: read the answer to %s %s: %w", method, u.Path, err)
	}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error != nil && eb.Error.Message != "" {
			eb.Error.Status = resp.StatusCode
			return eb.Error
		}
		snippet := strings.TrimSpace(string(data))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "..."
		}
		return &apiError{Status: resp.StatusCode, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_")),
			Message: fmt.Sprintf("%s %s answered %q", method, u.Path, snippet)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("server: malformed answer to %s %s: %w", method, u.Path, err)
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

func (h *httpBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	v := url.Values{}
	q.values(v)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	path := "/v1/dlq"
	if !q.Dead {
		path = "/v1/jobs"
		if len(q.States) > 0 {
			v.Set("state", strings.Join(q.States, ","))
		}
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

// Count is unknown over the API: it has no count route.
func (h *httpBackend) Count(context.Context, filterOptions) (int64, error) { return -1, nil }

func (h *httpBackend) Redrive(ctx context.Context, q redriveQuery, _ func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	body := server.RedriveBody{IDs: q.IDs, Rate: q.Rate, Payload: q.Payload, Note: q.Note}
	if len(q.IDs) == 0 {
		if q.Filter.empty() {
			body.All = true
		} else {
			fb := q.Filter.FilterBody
			body.Filter = &fb
		}
	}
	var prog redrive.RedriveProgress
	return prog, h.do(ctx, http.MethodPost, "/v1/dlq/redrive", nil, body, &prog)
}

func (h *httpBackend) Purge(ctx context.Context, fo filterOptions, all bool) (int64, error) {
	v := url.Values{}
	fo.values(v)
	if all {
		v.Set("all", "true")
	}
	var res struct {
		Purged int64 `json:"purged"`
	}
	return res.Purged, h.do(ctx, http.MethodDelete, "/v1/dlq", v, nil, &res)
}

// Export pages through GET /v1/dlq and writes each job's folder as
// redrive.Client.Export does.
func (h *httpBackend) Export(ctx context.Context, dir string, fo filterOptions, progress func(int)) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	q := listQuery{filterOptions: fo, Dead: true, Limit: 200}
	n := 0
	for {
		res, err := h.List(ctx, q)
		if err != nil {
			return n, err
		}
		for _, j := range res.Jobs {
			if err := redrive.ExportJob(dir, j); err != nil {
				return n, fmt.Errorf("export job %d: %w", j.ID, err)
			}
			n++
		}
		if progress != nil {
			progress(n)
		}
		if res.Next == "" {
			return n, nil
		}
		q.Cursor = res.Next
	}
}
