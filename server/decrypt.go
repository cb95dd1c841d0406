package server

import (
	"context"
	"net/http"

	"github.com/redrivehq/redrive/store"
)

// Sealed exports: when the store seals payloads (serve's payload keys),
// a DLQ export (GET /v1/dlq/export, POST /v1/dlq/export) writes the
// payloads of sealed queues, and those stored sealed, sealed under the
// current key (redrive.Client.Exported); decrypt=true (the query's, or
// the folder export's body field) writes them in plaintext, secrets
// included, for the admin role only, and is recorded in the audit log
// first (refused when it cannot be).

// decryptParam is the query parameter with which an admin exports
// plaintext payloads.
const decryptParam = "decrypt"

// decrypt reads the decrypt parameter of q: false unless an admin asked
// for plaintext, whose export by pattern is then recorded in the audit
// log (a decrypt that cannot be recorded is refused).
func (a *api) decrypt(r *http.Request, q *query, pattern string) (bool, error) {
	on, err := q.parseBool(decryptParam)
	if err != nil || !on {
		return false, err
	}
	p := principalOf(r.Context())
	if p.role < RoleAdmin {
		return false, forbidden(p, RoleAdmin, "exporting plaintext payloads (decrypt=true)")
	}
	e := store.AuditEntry{Actor: p.name, Role: p.role.String(), Action: pattern, Remote: a.auditRemote(r), Status: http.StatusOK}
	if !a.authOn() {
		e.Actor, e.Role = anonymousActor, ""
	}
	e.Target, e.Note = auditTarget(pattern, r, nil)
	if _, err := a.client.Store().AppendAudit(context.WithoutCancel(r.Context()), e); err != nil {
		a.log.Error("audit: an export of plaintext was refused: it could not be recorded", "action", pattern, "actor", e.Actor, "err", err)
		return false, &apiError{status: http.StatusServiceUnavailable, code: "unavailable",
			msg: "plaintext payloads are exported only when the audit log records it, and the store refused the entry: try again"}
	}
	return true, nil
}
