package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// The audit log: every change made through the API (the dashboard's
// included, as it goes through the API), enqueues aside, is recorded in
// the store (store.Audit) once it succeeded: who (the token's name, or
// "anonymous" on a server without tokens), the role, the route, what it
// was made on (the path's parameters, the query, the body without any
// payload), how many things it affected when the answer says so, the
// operation it started, its note, the client's address and the answer's
// status. GET /v1/audit reads it; nothing changes or deletes an entry but
// retention.

// notAudited are the routes that change something and are not recorded:
// enqueues (the jobs themselves are the record), a workflow's too.
var notAudited = map[string]bool{
	"POST /v1/jobs":                true,
	"POST /v1/jobs/batch":          true,
	"POST /v1/workflows":           true,
	"POST /v1/workflows/batch":     true,
	"POST /v1/workflows/{id}/jobs": true,
	// The worker protocol: the jobs' histories are the record.
	"POST /v1/worker/lease":             true,
	"POST /v1/worker/heartbeat":         true,
	"POST /v1/worker/cancels":           true,
	"POST /v1/worker/outcomes":          true,
	"POST /v1/worker/jobs/{id}/outcome": true,
	"POST /v1/worker/stop":              true,
}

// audited reports whether the route's successful requests are recorded.
func audited(pattern string) bool {
	method, path, _ := strings.Cut(pattern, " ")
	return method != http.MethodGet && method != http.MethodHead && isV1(path) && !notAudited[pattern]
}

// anonymousActor is the actor of a change made on a server without
// tokens.
const anonymousActor = "anonymous"

// maxAuditBody is how much of a request's body the audit log keeps.
const maxAuditBody = 4096

// maxAuditAnswer is how much of an answer the audit log reads for the
// counts and the operation.
const maxAuditAnswer = 8192

// audit records the successful requests of the route pattern in the
// audit log.
func (a *api) audit(pattern string, next http.Handler) http.Handler {
	if !audited(pattern) {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := &headReader{r: r.Body, max: maxAuditBody}
		if r.Body != nil {
			r.Body = body
		}
		pending := &pendingAudit{pattern: pattern, body: body}
		r = r.WithContext(context.WithValue(r.Context(), pendingAuditKey{}, pending))
		rec := &answerRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if pending.recorded {
			return // when its operation started (auditStarted)
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if status >= 400 {
			return
		}
		count, opID := auditAnswer(rec.head.Bytes())
		a.appendAudit(r, pending, status, count, opID)
	})
}

// pendingAudit is the audit entry of a request being handled: written
// once the handler answered, or by auditStarted when the handler started
// an operation and waits for its end.
type pendingAudit struct {
	pattern  string
	body     *headReader
	recorded bool
}

type pendingAuditKey struct{}

// auditStarted records the request's change now, once the operation op
// it started exists, when the handler goes on to wait for its end
// (wait=true): the operation runs in the workers whatever becomes of
// the wait (a client that leaves, a crash), so it is recorded as started
// (status 202, its operation named), and not again when the wait is
// answered.
func (a *api) auditStarted(r *http.Request, op *redrive.Operation) {
	pending, ok := r.Context().Value(pendingAuditKey{}).(*pendingAudit)
	if !ok || pending.recorded {
		return
	}
	a.appendAudit(r, pending, http.StatusAccepted, max(op.Progress.Matched, 0), op.ID)
}

// appendAudit writes the entry of a change made: who, from where, on what
// (the request's path, query and body), its status and its count and
// operation.
func (a *api) appendAudit(r *http.Request, pending *pendingAudit, status int, count int64, opID string) {
	pending.recorded = true
	p := principalOf(r.Context())
	e := store.AuditEntry{Actor: p.name, Role: p.role.String(), Action: pending.pattern, Remote: a.auditRemote(r), Status: status,
		Count: count, OperationID: opID}
	if !a.authOn() {
		e.Actor, e.Role = anonymousActor, ""
	}
	e.Target, e.Note = auditTarget(pending.pattern, r, pending.body.head.Bytes())
	// The change is made: record it even if the client went away.
	ctx := context.WithoutCancel(r.Context())
	if _, err := a.client.Store().AppendAudit(ctx, e); err != nil {
		a.log.Error("audit: the change was made but could not be recorded", "action", pending.pattern, "actor", e.Actor, "err", err)
	}
}

// auditTarget renders what a change was made on: the path's parameters,
// the query and the body (its payload replaced by "payload_edited":
// true), as a JSON object; and the body's note.
func auditTarget(pattern string, r *http.Request, body []byte) (string, string) {
	t := map[string]any{}
	_, path, _ := strings.Cut(pattern, " ")
	for _, seg := range strings.Split(path, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(name, "}")
			t[name] = r.PathValue(name)
		}
	}
	if r.URL.RawQuery != "" {
		t["query"] = r.URL.RawQuery
	}
	note := ""
	if len(bytes.TrimSpace(body)) > 0 {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil {
			if _, ok := m["payload"]; ok {
				delete(m, "payload")
				m["payload_edited"] = json.RawMessage("true")
			}
			if n, ok := m["note"]; ok {
				_ = json.Unmarshal(n, &note)
			}
			t["body"] = m
		} else {
			t["body_truncated"] = true
		}
	}
	b, _ := json.Marshal(t)
	return store.TruncateUTF8(string(b), store.MaxAuditTarget), store.TruncateUTF8(note, 1000)
}

// auditAnswer reads the count and the operation of an answer: its
// operation's id, or the first count it gives (canceled, count, ...); 1
// for an answer about one thing.
func auditAnswer(b []byte) (int64, string) {
	var v struct {
		Operation *struct {
			ID      string `json:"id"`
			Matched int64  `json:"matched"`
		} `json:"operation"`
		Canceled *int64 `json:"canceled"`
		Count    *int64 `json:"count"`
	}
	if json.Unmarshal(b, &v) != nil {
		return 1, ""
	}
	switch {
	case v.Operation != nil:
		return v.Operation.Matched, v.Operation.ID
	case v.Canceled != nil:
		return *v.Canceled, ""
	case v.Count != nil:
		return *v.Count, ""
	}
	return 1, ""
}

// headReader keeps the first max bytes read through it.
type headReader struct {
	r    io.ReadCloser
	max  int
	head bytes.Buffer
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := h.max - h.head.Len(); room > 0 {
		h.head.Write(p[:min(n, room)])
	}
	return n, err
}

func (h *headReader) Close() error { return h.r.Close() }

// answerRecorder keeps the status and the first maxAuditAnswer bytes of
// an answer it passes on.
type answerRecorder struct {
	http.ResponseWriter
	status int
	head   bytes.Buffer
}

func (a *answerRecorder) WriteHeader(s int) {
	if a.status == 0 {
		a.status = s
	}
	a.ResponseWriter.WriteHeader(s)
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if room := maxAuditAnswer - a.head.Len(); room > 0 {
		a.head.Write(b[:min(len(b), room)])
	}
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (a *answerRecorder) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// defaultAuditList is the page size of GET /v1/audit without a limit.
const defaultAuditList = 100

// listAudit answers GET /v1/audit?actor=&action=&since=&until=&limit=&before=.
func (a *api) listAudit(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "actor", "action", "since", "until", "limit", "before")
	if err != nil {
		return err
	}
	n, err := q.limit()
	if err != nil {
		return err
	}
	if n == 0 {
		n = defaultAuditList
	}
	f := store.AuditFilter{Actor: q.get("actor"), Action: q.get("action")}
	if s := q.get("since"); s != "" {
		if f.Since, err = parseTime("since", s); err != nil {
			return err
		}
	}
	if s := q.get("until"); s != "" {
		if f.Until, err = parseTime("until", s); err != nil {
			return err
		}
	}
	var before int64
	if s := q.get("before"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			return badRequest("before", "before must be an audit entry id (a positive integer, the next of a page), got %q", clip(s))
		}
	}
	entries, next, err := a.client.Store().ListAudit(r.Context(), f, before, n)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []store.AuditEntry{}
	}
	body := map[string]any{"entries": entries}
	if next != 0 {
		body["next"] = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}
