// Package server is redrive's REST API: enqueue, read, list, count and
// cancel jobs, browse, count, group, redrive, purge and export the
// dead-letter queue, list, pause and resume queues, and read statistics,
// circuit breakers, the RabbitMQ queues `redrive serve` manages and the
// Kafka topics whose dead letters it keeps, as JSON over HTTP; and the
// web dashboard, at /.
//
// Bulk redrives, purges, replays and folder exports are durable
// operations kept in the store: the request that starts one is answered
// 202 with its Location, /v1/operations/{id}, which reports its progress
// until it ends (or, with ?wait=true, once it has ended). The worker that
// leads the fleet runs them (serve runs a worker); an API without any
// worker on its store leaves them pending.
//
// Every error is answered with a JSON body
//
//	{"error": {"code": "...", "message": "...", "field": "..."}}
//
// where field names the input at fault when there is one. Every input is
// bounded (body size, page size, batch size, string lengths); bad input
// gets a 4xx, never a panic.
package server

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/store"
)

// Options configure the API.
type Options struct {
	// Client is the engine client the API works on. Required.
	Client *redrive.Client
	// Breakers is the registry whose breakers GET /v1/breakers shows; it
	// may be nil.
	Breakers *breaker.Registry
	// Brokers are the RabbitMQ queues `redrive serve --amqp-url` manages,
	// which GET /v1/amqp/queues and the dashboard's overview show. It may
	// be nil: no managed queues.
	Brokers Brokers
	// Kafka are the Kafka topics whose dead letters `redrive serve
	// --kafka-topics` keeps in the store, which GET /v1/kafka/topics and
	// the dashboard's overview show. It may be nil: no such topics.
	Kafka KafkaTopics
	// Token is a bearer token of the admin role, named LegacyTokenName
	// ("admin"), beside Tokens; "" adds none. Without Token and Tokens
	// there is no authentication (serve only allows that on loopback).
	Token string
	// Tokens are the named tokens of the API, each with its role (see
	// Role): /v1 routes require one of them (or Token), and answer 403
	// forbidden, naming the role needed, to one whose role is below the
	// route's.
	Tokens []Token
	// Logger receives the API's logs (default slog.Default()).
	Logger *slog.Logger
	// MaxBody bounds a request body in bytes (default DefaultMaxBody).
	MaxBody int64
	// Context bounds the starting of operations (bulk redrives, purges,
	// replays, exports): when it ends, no more are started (503
	// shutting_down) and requests waiting on one (wait=true) are answered
	// with its state. The operations themselves are kept in the store and
	// run by workers: they go on. Default: context.Background().
	// Server.Close does the same.
	Context context.Context
	// MaxOperations bounds the unfinished operations (pending, running
	// or paused) at once (default DefaultMaxOperations); beyond it,
	// starting one is answered 429 too_many_operations.
	MaxOperations int
	// ExportDir is the folder under which POST /v1/dlq/export may write
	// (serve --export-dir), on the machine of the worker that runs the
	// export; "" refuses folder exports (403 export_disabled).
	ExportDir string
	// AllowedHosts are the host names (or addresses) the server answers
	// to; a request whose Host header names another is answered 421, so
	// that a DNS-rebinding page cannot reach the API or the dashboard.
	// Empty: any host. `redrive serve` on loopback sets LoopbackHosts and
	// its listen host, plus --allowed-host.
	AllowedHosts []string
	// TrustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-Proto and X-Forwarded-For headers are believed: a
	// dashboard session cookie is marked Secure when the request came over
	// TLS, or through one of them over https; and the throttle of token
	// guesses counts the client a request came from through them (the
	// last X-Forwarded-For entry that is not one of them), not the proxy.
	TrustedProxies []netip.Prefix
	// WriteTimeout bounds how long a response may wait on a client that
	// takes none of it in (default DefaultWriteTimeout): each write of a
	// response, of at most 64 KB, gets a write deadline that far ahead
	// (and there is none between writes, which over HTTP/2 would reset a
	// stream that waits), so
	// that a slow reader never holds a handler (and a connection) for
	// good, while an answer that takes long to compute, a long export or
	// wait (?wait=true), or a large answer read slowly still completes.
	// It overrides the http.Server's WriteTimeout for the API's routes.
	WriteTimeout time.Duration
	// TraceURLTemplate is the URL of a trace in a trace viewer, with
	// {trace_id} where the trace id goes (e.g.
	// http://jaeger:16686/trace/{trace_id}): the dashboard's job page
	// links the job's trace id to it. Empty, or not an absolute http(s)
	// URL holding {trace_id} (logged): no link. `redrive serve
	// --trace-url-template` refuses a bad one at start.
	TraceURLTemplate string
	// RedactHeaders are the patterns of the header names (and URL query
	// parameter names) whose values the API shows masked as "•••" in
	// http and download payloads: case-insensitive, "*" for any run of
	// characters, a pattern matches a whole name. nil: DefaultRedactHeaders;
	// empty: none. An invalid list is logged and the defaults are used.
	RedactHeaders []string
	// RedactFields are the patterns of the JSON field names, at any
	// depth, whose values the API shows masked in payloads of other
	// kinds; nil: DefaultRedactFields; empty: none.
	RedactFields []string
	// Workers runs the worker protocol (POST /v1/worker/...) for workers
	// in other languages; nil: those routes answer 404
	// worker_protocol_off.
	Workers *redrive.RemoteWorkers
}

// DefaultRedactHeaders are the default Options.RedactHeaders.
var DefaultRedactHeaders = slices.Clone(redact.DefaultHeaders)

// DefaultRedactFields are the default Options.RedactFields.
var DefaultRedactFields = slices.Clone(redact.DefaultFields)

// Limits of the API.
const (
	// DefaultWriteTimeout is the default of Options.WriteTimeout.
	DefaultWriteTimeout = time.Minute
	// DefaultMaxBody is the default bound on a request body.
	DefaultMaxBody int64 = 1 << 20
	// MaxBatch bounds the jobs of one POST /v1/jobs/batch, well below
	// redrive.MaxBatch so that one request stays small.
	MaxBatch = 1000
	// MaxPageSize bounds the limit parameter of listings.
	MaxPageSize = store.MaxPageSize
	// MaxRedriveIDs bounds the ids of one POST /v1/dlq/redrive.
	MaxRedriveIDs = 10000
	// MaxNote bounds the note of a redrive.
	MaxNote = 1000
	// maxName bounds kind, queue, dependency and reason strings.
	maxName = 200
	// maxKey bounds an idempotency key.
	maxKey = 512
	// maxQueryValue bounds any other query parameter value.
	maxQueryValue = 1024
	// MaxRate bounds the rate of a redrive, in jobs per second; a rate
	// must be 0 (no bound) or at least MinRate.
	MaxRate = 1e6
	// MinRate is the smallest non-zero redrive rate, so that a redrive
	// cannot stall a request for days between two jobs.
	MinRate = 0.1
)

//go:embed openapi.json
var openapiSpec []byte

// api holds the handlers' dependencies.
type api struct {
	client   *redrive.Client
	breakers *breaker.Registry
	brokers  Brokers
	kafka    KafkaTopics
	// tokens are Options.Tokens and Options.Token; none means no
	// authentication.
	tokens  []Token
	log     *slog.Logger
	maxBody int64
	// writeTimeout is Options.WriteTimeout.
	writeTimeout time.Duration
	// indexPage is the dashboard's page with the trace viewer's URL
	// template (indexFor adds the signed-in role and name).
	indexPage []byte
	ops       *operations
	trusted   []netip.Prefix
	throttle  loginThrottle
	// throttled logs the throttle's refusals, once a minute.
	throttled throttleLog
	// storeTrouble logs store outages once a minute.
	storeTrouble troubleLog
	// redactor masks the secrets of what the API shows (redact.go).
	redactor *redact.Redactor
	// workers runs the worker protocol (worker.go); nil: off.
	workers *redrive.RemoteWorkers
}

// Server is the REST API: an http.Handler, which starts the operations
// (bulk redrives, purges, replays, exports) its requests ask for.
type Server struct {
	handler http.Handler
	ops     *operations
	api     *api
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close refuses new operations with 503 shutting_down and answers the
// requests waiting on one (wait=true) with its current state. The
// operations go on in the workers that run them. Close the server before
// the store it works on. It always returns nil.
func (s *Server) Close() error {
	s.ops.close()
	return nil
}

// routes lists every route New registers, as ServeMux patterns. The
// OpenAPI test checks that openapi.json describes each of them.
var routes = []string{
	"POST /v1/jobs",
	"POST /v1/jobs/batch",
	"POST /v1/jobs/cancel",
	"GET /v1/jobs",
	"GET /v1/jobs/{id}",
	"POST /v1/jobs/{id}/cancel",
	"POST /v1/jobs/{id}/priority",
	"POST /v1/jobs/{id}/run",
	"GET /v1/dlq",
	"DELETE /v1/dlq",
	"GET /v1/dlq/groups",
	"POST /v1/dlq/redrive",
	"GET /v1/dlq/export",
	"GET /v1/operations",
	"GET /v1/operations/{id}",
	"DELETE /v1/operations/{id}",
	"POST /v1/operations/{id}/pause",
	"POST /v1/operations/{id}/resume",
	"POST /v1/operations/{id}/cancel",
	"POST /v1/replay",
	"POST /v1/dlq/export",
	"GET /v1/stats",
	"GET /v1/stats/series",
	"GET /v1/queues",
	"GET /v1/workers",
	"POST /v1/queues/{name}/pause",
	"POST /v1/queues/{name}/resume",
	"GET /v1/schedules",
	"GET /v1/schedules/{name}",
	"DELETE /v1/schedules/{name}",
	"POST /v1/schedules/{name}/pause",
	"POST /v1/schedules/{name}/resume",
	"POST /v1/schedules/{name}/trigger",
	"GET /v1/breakers",
	"GET /v1/limits",
	"PUT /v1/limits/{name}",
	"POST /v1/breakers/{name}/open",
	"POST /v1/breakers/{name}/reset",
	"DELETE /v1/breakers/{name}",
	"GET /v1/amqp/queues",
	"GET /v1/kafka/topics",
	"GET /v1/openapi.json",
	"GET /healthz",
	"GET /readyz",

	// Counts (count.go).
	"GET /v1/jobs/count",
	"GET /v1/dlq/count",

	// The audit log (audit.go).
	"GET /v1/audit",

	// Workflows (workflows.go).
	"POST /v1/workflows",
	"POST /v1/workflows/batch",
	"GET /v1/workflows",
	"GET /v1/workflows/{id}",
	"POST /v1/workflows/{id}/cancel",
	"POST /v1/workflows/{id}/jobs",

	// The worker protocol (worker.go).
	"POST /v1/worker/lease",
	"POST /v1/worker/heartbeat",
	"POST /v1/worker/cancels",
	"POST /v1/worker/outcomes",
	"POST /v1/worker/jobs/{id}/outcome",
	"POST /v1/worker/stop",
}

// New returns the Server serving /v1/..., /healthz, /readyz (and 404
// JSON for anything else under /v1). Close it when done (see Close).
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxOperations <= 0 {
		opts.MaxOperations = DefaultMaxOperations
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	a := &api{client: opts.Client, breakers: opts.Breakers, brokers: opts.Brokers, kafka: opts.Kafka, log: opts.Logger, maxBody: opts.MaxBody,
		ops: newOperations(opts.Context, opts.MaxOperations, opts.Logger), trusted: opts.TrustedProxies,
		throttle: loginThrottle{now: time.Now}, writeTimeout: opts.WriteTimeout, workers: opts.Workers}
	if opts.Token != "" {
		a.tokens = append(a.tokens, Token{Name: LegacyTokenName, Role: RoleAdmin, SHA256: sha256.Sum256([]byte(opts.Token))})
	}
	a.tokens = append(a.tokens, opts.Tokens...)
	rd, err := newRedactor(opts.RedactHeaders, opts.RedactFields)
	if err != nil {
		a.log.Error("the patterns of secrets are invalid: the default ones are used", "error", err)
		rd = redact.Default()
	}
	a.redactor = rd
	tmpl := opts.TraceURLTemplate
	if tmpl != "" {
		if err := tracectx.CheckURLTemplate(tmpl); err != nil {
			a.log.Warn("dashboard: the trace URL template is unusable; trace ids are not linked", "error", err)
			tmpl = ""
		}
	}
	a.indexPage = dashboardPage(indexPage, tmpl)
	handlers := map[string]handlerFunc{
		"POST /v1/jobs":             a.enqueue,
		"POST /v1/jobs/batch":       a.enqueueBatch,
		"GET /v1/jobs":              a.listJobs,
		"GET /v1/jobs/{id}":         a.getJob,
		"POST /v1/jobs/{id}/cancel": a.cancelJob,
		"GET /v1/dlq":               a.listDead,
		"DELETE /v1/dlq":            a.purge,
		"GET /v1/dlq/groups":        a.groups,
		"POST /v1/dlq/redrive":      a.redrive,
		"GET /v1/stats":             a.stats,
		"GET /v1/stats/series":      a.series,
		"GET /v1/breakers":          a.listBreakers,
		"GET /v1/openapi.json":      a.openapi,
		"GET /healthz":              a.healthz,
		"GET /readyz":               a.readyz,

		// Queues (queues.go).
		"GET /v1/queues":                a.listQueues,
		"GET /v1/workers":               a.listWorkers,
		"POST /v1/queues/{name}/pause":  a.pauseQueue,
		"POST /v1/queues/{name}/resume": a.resumeQueue,
	}
	// Periodic schedules (schedules.go).
	handlers["GET /v1/schedules"] = a.listSchedules
	handlers["GET /v1/schedules/{name}"] = a.getSchedule
	handlers["DELETE /v1/schedules/{name}"] = a.deleteSchedule
	handlers["POST /v1/schedules/{name}/pause"] = a.pauseSchedule
	handlers["POST /v1/schedules/{name}/resume"] = a.resumeSchedule
	handlers["POST /v1/schedules/{name}/trigger"] = a.triggerSchedule
	// The DLQ's bulk operations and export (operations.go, dlq.go).
	handlers["GET /v1/dlq/export"] = a.export
	handlers["GET /v1/operations"] = a.listOperations
	// Canceling (DELETE, or POST .../cancel) stops the runner after its
	// current batch; what it did stays done.
	handlers["GET /v1/operations/{id}"] = a.onOperation(a.client.Operation)
	handlers["DELETE /v1/operations/{id}"] = a.onOperation(a.client.CancelOperation)
	handlers["POST /v1/operations/{id}/pause"] = a.onOperation(a.client.PauseOperation)
	handlers["POST /v1/operations/{id}/resume"] = a.onOperation(a.client.ResumeOperation)
	handlers["POST /v1/operations/{id}/cancel"] = a.onOperation(a.client.CancelOperation)
	handlers["POST /v1/replay"] = a.replay
	handlers["POST /v1/jobs/cancel"] = a.cancelJobs
	handlers["POST /v1/dlq/export"] = a.exportDead
	a.ops.client, a.ops.exportDir = opts.Client, opts.ExportDir
	// How many jobs a listing, a purge or a redrive selects (count.go).
	handlers["POST /v1/jobs/{id}/priority"] = a.setPriority
	handlers["POST /v1/jobs/{id}/run"] = a.runNow
	handlers["GET /v1/jobs/count"] = a.countJobs
	handlers["GET /v1/dlq/count"] = a.countDead
	// The managed RabbitMQ queues (amqpqueues.go).
	handlers["GET /v1/amqp/queues"] = a.listManagedQueues
	// The Kafka topics whose dead letters serve keeps (kafkatopics.go).
	handlers["GET /v1/kafka/topics"] = a.listKafkaTopics
	// The fleet's circuit breakers (breakers.go).
	handlers["POST /v1/breakers/{name}/open"] = a.openBreaker
	handlers["POST /v1/breakers/{name}/reset"] = a.resetBreaker
	handlers["DELETE /v1/breakers/{name}"] = a.deleteBreaker
	// The fleet's concurrency limits (limits.go).
	handlers["GET /v1/limits"] = a.listLimits
	handlers["PUT /v1/limits/{name}"] = a.setLimit
	// The audit log (audit.go).
	handlers["GET /v1/audit"] = a.listAudit
	// Workflows (workflows.go).
	handlers["POST /v1/workflows"] = a.enqueueWorkflow
	handlers["POST /v1/workflows/batch"] = a.enqueueWorkflows
	handlers["GET /v1/workflows"] = a.listWorkflows
	handlers["GET /v1/workflows/{id}"] = a.getWorkflow
	handlers["POST /v1/workflows/{id}/cancel"] = a.cancelWorkflow
	handlers["POST /v1/workflows/{id}/jobs"] = a.addToWorkflow
	// The worker protocol (worker.go).
	handlers["POST /v1/worker/lease"] = a.workerLease
	handlers["POST /v1/worker/heartbeat"] = a.workerHeartbeat
	handlers["POST /v1/worker/cancels"] = a.workerCancels
	handlers["POST /v1/worker/outcomes"] = a.workerOutcomes
	handlers["POST /v1/worker/jobs/{id}/outcome"] = a.workerOutcome
	handlers["POST /v1/worker/stop"] = a.workerStop
	mux := http.NewServeMux()
	for _, p := range routes {
		need, ok := routeRoles[p]
		if !ok {
			panic("server: no role for route " + p)
		}
		mux.Handle(p, a.require(p, need, a.audit(p, a.wrap(handlers[p]))))
	}
	ui := a.dashboardHandlers()
	for _, p := range dashboardRoutes {
		mux.Handle(p, ui[p])
	}
	h := a.auth(a.route(mux))
	h = crossOriginGuard(h)
	h = hostGuard(opts.AllowedHosts, h)
	return &Server{handler: a.writeDeadline(a.recoverer(h)), ops: a.ops, api: a}
}

// handlerFunc is a handler that returns its error for wrap to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// apiError is an error answered as is.
type apiError struct {
	status int
	code   string
	msg    string
	field  string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "invalid", field: field, msg: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"response could not be encoded"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, errorBody{Error: errorDetail{Code: e.code, Message: e.msg, Field: e.field}})
}

// wrap answers a handler's error as JSON.
func (a *api) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, a.toAPIError(r, err))
		}
	})
}

// toAPIError maps engine and store errors to statuses.
func (a *api) toAPIError(r *http.Request, err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, redrive.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: "not_found", msg: err.Error()}
	case errors.Is(err, redrive.ErrNotReprocessable):
		return &apiError{status: http.StatusConflict, code: "not_reprocessable", msg: err.Error()}
	case errors.Is(err, redrive.ErrConflict):
		return &apiError{status: http.StatusConflict, code: "conflict", msg: err.Error()}
	case errors.Is(err, redrive.ErrInvalid):
		e := &apiError{status: http.StatusBadRequest, code: "invalid", msg: err.Error()}
		if strings.Contains(err.Error(), "payload") {
			e.field = "payload"
		}
		return e
	case errors.Is(err, store.ErrFull):
		a.storeTrouble.log(a.log, "the store is out of space: writes fail until room is made", err)
		return &apiError{status: http.StatusInsufficientStorage, code: "store_full", retryAfter: 30,
			msg: "the store is out of space (disk full): nothing was written; try again once room is made"}
	case errors.Is(err, store.ErrReadOnly):
		a.storeTrouble.log(a.log, "the store is read-only: writes fail", err)
		return &apiError{status: http.StatusServiceUnavailable, code: "store_read_only", retryAfter: 30,
			msg: "the store is read-only: nothing was written"}
	case errors.Is(err, store.ErrUnavailable):
		a.storeTrouble.log(a.log, "the store is unavailable", err)
		return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: 5,
			msg: "the store is unavailable (the database is down, restarting or locked by another process); try again shortly"}
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		a.log.Warn("api request not completed", "method", r.Method, "path", r.URL.Path, "err", err)
		return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: 5,
			msg: "the store is unavailable or the request was canceled"}
	}
	a.log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error; see the server log"}
}

// troubleLog logs a recurring store problem once a minute, with how many
// requests it failed meanwhile, rather than once per request.
type troubleLog struct {
	mu     sync.Mutex
	last   time.Time
	what   string
	missed int
}

func (t *troubleLog) log(l *slog.Logger, what string, err error) {
	t.mu.Lock()
	now := time.Now()
	if what == t.what && now.Sub(t.last) < time.Minute {
		t.missed++
		t.mu.Unlock()
		return
	}
	missed := t.missed
	t.last, t.what, t.missed = now, what, 0
	t.mu.Unlock()
	l.Error(what, "error", err, "requests_failed_since_last_line", missed)
}

// isV1 reports whether the path is under the versioned API.
func isV1(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

// auth requires a bearer token on every /v1 route when the server has
// tokens, and puts its principal (name and role) in the request's
// context. A dashboard session cookie stands in for the token; with the
// cookie, a request that is not a GET or HEAD must also carry the
// X-Redrive-Request header, which a cross-site form cannot send.
func (a *api) auth(next http.Handler) http.Handler {
	if !a.authOn() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isV1(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		h := r.Header.Get("Authorization")
		if h == "" {
			p, ok, err := a.validSession(r)
			if err != nil {
				writeError(w, a.toAPIError(r, err))
				return
			}
			if ok {
				if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(csrfHeader) == "" {
					writeError(w, &apiError{status: http.StatusForbidden, code: "csrf",
						msg: "a request authorized by the dashboard's session cookie must carry the " + csrfHeader + " header"})
					return
				}
				next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, code: "unauthorized",
				msg: "missing bearer token: send Authorization: Bearer <token>"})
			return
		}
		if p, ok := a.checkBearer(w, r); ok {
			next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
		}
	})
}

// authOn reports whether the server has tokens, hence authenticates.
func (a *api) authOn() bool { return len(a.tokens) > 0 }

// checkBearer checks the request's Authorization header against the
// tokens, through the throttle: a wrong one counts as a guess, and a
// client whose guesses are used up is answered 429 unchecked. It answers
// the refusals itself and returns the token's principal when the request
// may go on.
func (a *api) checkBearer(w http.ResponseWriter, r *http.Request) (principal, bool) {
	h := r.Header.Get("Authorization")
	client := a.clientKey(r)
	var p principal
	allowed, right, wait := a.throttle.guess(client, func() bool {
		var ok bool
		p, ok = a.bearer(h)
		return ok
	})
	switch {
	case !allowed:
		a.throttled.warn(a.log, "api: bearer token guesses throttled", "remote", r.RemoteAddr, "client", client, "retry_after", wait.Round(time.Second))
		writeError(w, &apiError{status: http.StatusTooManyRequests, code: "too_many_attempts", retryAfter: int(wait/time.Second) + 1,
			msg: "too many requests with a wrong bearer token from this address: wait, then send the right one"})
		return p, false
	case !right:
		w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
		writeError(w, &apiError{status: http.StatusUnauthorized, code: "unauthorized", msg: "invalid bearer token"})
		return p, false
	}
	return p, true
}

// bearerGiven reports whether the request carries a right bearer token
// (a wrong one counts as a guess, for the throttle), without answering.
func (a *api) bearerGiven(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if h == "" {
		return false
	}
	_, right, _ := a.throttle.guess(a.clientKey(r), func() bool {
		_, ok := a.bearer(h)
		return ok
	})
	return right
}

// bearer returns the principal of the token an Authorization header
// value carries.
func (a *api) bearer(h string) (principal, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return principal{}, false
	}
	t, ok := a.lookupToken(strings.TrimSpace(tok))
	return principal{name: t.Name, role: t.Role}, ok
}

// RequireToken guards h, a handler served beside the API (such as
// /metrics), with the API's bearer tokens (Options.Token and Tokens, any
// role), through the same throttle of wrong guesses as the API and the
// dashboard's sign-in. Without a token it returns h.
func (s *Server) RequireToken(h http.Handler) http.Handler {
	if !s.api.authOn() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, code: "unauthorized",
				msg: "missing bearer token: send Authorization: Bearer <token>"})
			return
		}
		if _, ok := s.api.checkBearer(w, r); ok {
			h.ServeHTTP(w, r)
		}
	})
}

// route serves the mux, answering unknown routes (404) and wrong methods
// (405) with JSON instead of the mux's plain text.
func (a *api) route(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: let the mux's own handler say 404 or 405 (with Allow)
		// into a capture, then answer in JSON.
		c := &capture{header: http.Header{}}
		h.ServeHTTP(c, r)
		if c.status == http.StatusMethodNotAllowed {
			if allow := c.header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
				msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, c.header.Get("Allow"))})
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
}

// capture is a ResponseWriter that keeps the status and headers only.
type capture struct {
	header http.Header
	status int
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *capture) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return len(b), nil
}

// writeDeadline bounds how long each write of a response may wait on the
// client (see Options.WriteTimeout): a write deadline writeTimeout ahead
// is set before every write of at most deadlineChunk bytes, and cleared
// once it is done, so that the time a handler takes to compute its answer
// or wait does not count (over HTTP/2 a deadline is a timer that resets
// the stream when it fires, writing or not), a client that keeps reading
// gets the whole of a large answer, and one that takes in nothing for
// writeTimeout is cut off.
func (a *api) writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: a.writeTimeout}
		// None while the handler works (the http.Server's WriteTimeout
		// may have set one when the request came)...
		d.clear()
		next.ServeHTTP(d, r)
		// ... and one for what net/http writes once the handler returns
		// (the buffered rest, the status of an answer without a body).
		d.extend()
	})
}

// deadlineChunk is how many bytes of a response one write deadline
// covers: at least deadlineChunk per writeTimeout keeps a client served.
const deadlineChunk = 64 << 10

// deadlineWriter is a ResponseWriter that sets a write deadline around
// each deadlineChunk it writes.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// Write writes b in chunks of deadlineChunk, each with a deadline of its
// own.
func (d *deadlineWriter) Write(b []byte) (int, error) {
	defer d.clear()
	n := 0
	for len(b) > 0 {
		d.extend()
		m, err := d.ResponseWriter.Write(b[:min(len(b), deadlineChunk)])
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// WriteHeader sends the status (at once for a 1xx), with a deadline of
// its own.
func (d *deadlineWriter) WriteHeader(code int) {
	defer d.clear()
	d.extend()
	d.ResponseWriter.WriteHeader(code)
}

// Flush sends what is buffered, with a deadline of its own.
func (d *deadlineWriter) Flush() {
	defer d.clear()
	d.extend()
	_ = d.rc.Flush()
}

// extend moves the write deadline timeout ahead of now; writers that
// cannot (a test's recorder) are left as they are.
func (d *deadlineWriter) extend() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

// clear removes the write deadline.
func (d *deadlineWriter) clear() { _ = d.rc.SetWriteDeadline(time.Time{}) }

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// extendWrite moves the response's write deadline writeTimeout ahead of
// now; writers that cannot (a test's recorder) are left as they are.
func (a *api) extendWrite(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(a.writeTimeout))
}

// recoverer turns a handler's panic into a 500 JSON answer and a log.
func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.log.Error("api handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !tw.wrote {
				writeError(w, &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error; see the server log"})
			}
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter records whether the response was started.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(s int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(s)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (a *api) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := a.client.Count(ctx, redrive.Filter{IDs: []int64{0}}); err != nil {
		a.log.Warn("readiness check failed", "err", err)
		return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: 5, msg: "the store is not reachable"}
	}
	// Reachable is not enough: a store that cannot write (a full disk)
	// would take jobs it cannot record.
	if wh, ok := a.client.Store().(store.WriteHealth); ok {
		if err := wh.WriteHealth(); err != nil {
			a.storeTrouble.log(a.log, "readiness: the store's last write failed", err)
			// The reason names files, hosts or the database's own words:
			// only for those who hold the token (readyz needs none).
			msg := "the store's last write failed (the reason is in the server's log, and in this answer with the bearer token)"
			if !a.authOn() || a.bearerGiven(r) {
				msg = "the store's last write failed: " + err.Error()
			}
			return &apiError{status: http.StatusServiceUnavailable, code: "not_writable", retryAfter: 5, msg: msg}
		}
	}
	// A broker away does not make the API unready: the store, the API and
	// the dashboard still work, and serve reconnects by itself. It is
	// said here (status "degraded") for probes and operators to see.
	status := "ready"
	var brokers []readyBroker
	if bh, ok := a.brokers.(BrokerHealth); ok {
		for _, c := range bh.Connections() {
			brokers = append(brokers, readyBroker{Kind: "amqp", Connected: c.Connected, Reconnects: c.Reconnects})
			if !c.Connected {
				status = "degraded"
			}
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Status  string        `json:"status"`
		Brokers []readyBroker `json:"brokers,omitempty"`
	}{status, brokers})
	return nil
}

func (a *api) openapi(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiSpec)
	return nil
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	s, err := a.client.Stats(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}
