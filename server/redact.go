package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/redact"
	"github.com/redrivehq/redrive/store"
)

// Secrets in what the API shows: every read that returns a job, a dead
// letter, a group's sample error or a schedule shows the secrets of its
// payload as redact.Mask ("•••"): http and download payloads' headers and
// query parameters named like secrets (Options.RedactHeaders), the
// password of their URL, and the fields named like secrets of other
// kinds' payloads (Options.RedactFields); and the same values wherever a
// text the job carries echoes them (its last error, its history's errors
// and notes, a previous payload). A completed job's result (GET
// /v1/jobs/{id}) is masked the same way: its fields named like secrets,
// and the payload's secrets it echoes. An admin may ask for the secrets with
// ?reveal=true on the job reads (GET /v1/jobs/{id}, /v1/jobs, /v1/dlq,
// /v1/dlq/export); each such read is recorded in the audit log first,
// and refused when it cannot be.

// revealParam is the query parameter with which an admin reads secrets.
const revealParam = "reveal"

// newRedactor builds the API's redactor from the options' patterns (nil:
// the defaults; empty: none).
func newRedactor(headers, fields []string) (*redact.Redactor, error) {
	r := redact.Default()
	var err error
	if headers != nil {
		if r.Headers, err = redact.New(headers); err != nil {
			return nil, fmt.Errorf("server: RedactHeaders: %w", err)
		}
	}
	if fields != nil {
		if r.Fields, err = redact.New(fields); err != nil {
			return nil, fmt.Errorf("server: RedactFields: %w", err)
		}
	}
	return r, nil
}

// reveal reads the reveal parameter of q: false unless an admin asked
// for the secrets, whose read of pattern is then recorded in the audit
// log (a reveal that cannot be recorded is refused).
func (a *api) reveal(r *http.Request, q *query, pattern string) (bool, error) {
	on, err := q.parseBool(revealParam)
	if err != nil || !on {
		return false, err
	}
	p := principalOf(r.Context())
	if p.role < RoleAdmin {
		return false, forbidden(p, RoleAdmin, "reading secrets (reveal=true)")
	}
	e := store.AuditEntry{Actor: p.name, Role: p.role.String(), Action: pattern, Remote: a.auditRemote(r), Status: http.StatusOK}
	if !a.authOn() {
		e.Actor, e.Role = anonymousActor, ""
	}
	e.Target, e.Note = auditTarget(pattern, r, nil)
	if _, err := a.client.Store().AppendAudit(context.WithoutCancel(r.Context()), e); err != nil {
		a.log.Error("audit: a reveal of secrets was refused: it could not be recorded", "action", pattern, "actor", e.Actor, "err", err)
		return false, &apiError{status: http.StatusServiceUnavailable, code: "unavailable",
			msg: "secrets are shown only when the audit log records it, and the store refused the entry: try again"}
	}
	return true, nil
}

// redactJob masks the secrets of j's payload, and their echoes in its
// texts, in place.
func (a *api) redactJob(j *redrive.Job) {
	if j == nil {
		return
	}
	payload, secrets := a.redactor.Payload(j.Kind, j.Payload)
	j.Payload = payload
	// An event from before an edit may echo a secret the payload held
	// then: the previous payloads' secrets are masked too.
	for _, ev := range j.History {
		if ev.PreviousPayload != "" && json.Valid([]byte(ev.PreviousPayload)) {
			_, more := a.redactor.Payload(j.Kind, json.RawMessage(ev.PreviousPayload))
			secrets = append(secrets, more...)
		}
	}
	j.LastError = redact.Scrub(j.LastError, secrets)
	j.Summary = redact.Scrub(j.Summary, secrets)
	j.Result = a.redactResult(j.Result, secrets)
	for i := range j.History {
		ev := &j.History[i]
		ev.Error = redact.Scrub(ev.Error, secrets)
		ev.Note = redact.Scrub(ev.Note, secrets)
		if ev.PreviousPayload != "" {
			ev.PreviousPayload = a.redactPrevious(j.Kind, ev.PreviousPayload, secrets)
		}
	}
}

// redactResult masks the secrets of a completed job's result as a
// payload's (fields named like secrets, whatever the job's kind) and the
// secrets of its payload the result echoes (secrets). An echo whose mask
// would leave the result no longer JSON (a secret outside a string)
// masks the result whole, as a JSON string.
func (a *api) redactResult(result json.RawMessage, secrets []string) json.RawMessage {
	if len(result) == 0 {
		return result
	}
	masked, _ := a.redactor.Payload("", result)
	scrubbed := redact.Scrub(string(masked), secrets)
	if scrubbed == string(masked) {
		return masked
	}
	if !json.Valid([]byte(scrubbed)) {
		b, _ := json.Marshal(redact.Mask)
		return b
	}
	return json.RawMessage(scrubbed)
}

// redactPrevious masks a redriven event's previous payload: a whole one
// as a payload; one cut short (no longer JSON) shows the mask alone
// unless it holds no name the patterns could match.
func (a *api) redactPrevious(kind, prev string, secrets []string) string {
	if json.Valid([]byte(prev)) {
		p, _ := a.redactor.Payload(kind, json.RawMessage(prev))
		return redact.Scrub(string(p), secrets)
	}
	return redact.Mask
}

// redactGroups masks the secrets the groups' sample errors echo, read
// from each sample job's payload.
func (a *api) redactGroups(ctx context.Context, gs []redrive.Group) {
	for i := range gs {
		g := &gs[i]
		if g.Sample == "" || g.SampleID == 0 {
			continue
		}
		j, err := a.client.Get(ctx, g.SampleID)
		if err != nil {
			continue // gone since: its error is the store's as written
		}
		_, secrets := a.redactor.Payload(j.Kind, j.Payload)
		g.Sample = redact.Scrub(g.Sample, secrets)
	}
}

// redactSchedule masks the secrets of a schedule's payload.
func (a *api) redactSchedule(s *redrive.ScheduleInfo) {
	if s != nil {
		s.Payload, _ = a.redactor.Payload(s.Kind, s.Payload)
	}
}

// restorePayload puts back, in an edited payload that keeps the mask, the
// secrets of the jobs of ids: each masked value keeps the job's. The jobs
// must hold the same secrets there (they get one payload); a masked
// payload for a filter is refused, as the jobs it names are not read.
func (a *api) restorePayload(ctx context.Context, edited json.RawMessage, ids []int64) (json.RawMessage, error) {
	if !redact.HasMask(edited) {
		return edited, nil
	}
	if len(ids) == 0 {
		return nil, badRequest("payload", "the payload holds the mask %s of a secret; a masked payload edits jobs named by ids only (the secret of each is kept): give ids, or the secret's value itself", redact.Mask)
	}
	var out json.RawMessage
	for _, id := range ids {
		j, err := a.client.Get(ctx, id)
		if err != nil {
			return nil, notFound(err, id)
		}
		p, err := redact.Restore(j.Kind, edited, j.Payload)
		if err != nil {
			return nil, badRequest("payload", "job %d: %v", id, err)
		}
		if out != nil && !bytes.Equal(p, out) {
			return nil, badRequest("payload", "the payload holds the mask %s where jobs %d and %d hold different secrets; edit them one at a time, or give the value itself", redact.Mask, ids[0], id)
		}
		out = p
	}
	return out, nil
}
