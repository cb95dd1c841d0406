package store

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Audit is the part of a Store that keeps the audit log: one entry per
// change made through the API, the dashboard or the command-line tool
// (enqueues aside). Entries are appended and read; no method changes
// one, and only retention (DeleteAudit, run by the worker that leads
// maintenance) deletes them.
type Audit interface {
	// AppendAudit appends e (its ID is assigned; a zero At is now) and
	// returns it as stored.
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)

	// ListAudit returns up to limit entries matching f, newest first,
	// with IDs below before (0: from the newest), and the cursor of the
	// next page (the last entry's ID; 0 when there is none).
	ListAudit(ctx context.Context, f AuditFilter, before int64, limit int) ([]AuditEntry, int64, error)

	// DeleteAudit deletes the entries made before before, and returns
	// how many.
	DeleteAudit(ctx context.Context, before time.Time) (int64, error)
}

// AuditEntry is one change recorded in the audit log.
type AuditEntry struct {
	// ID orders the entries: a later entry has a greater one.
	ID int64 `json:"id"`
	// At is when the change was made.
	At time.Time `json:"at"`
	// Actor is who made it: the name of the API token, "local" for the
	// command-line tool on the store, "anonymous" for the API of a
	// server without tokens.
	Actor string `json:"actor"`
	// Role is the actor's role (read, operate, admin); "" for local.
	Role string `json:"role,omitempty"`
	// Action is what was done: the API's route ("DELETE /v1/dlq") or the
	// command ("dlq purge").
	Action string `json:"action"`
	// Target says on what: the path's parameters, the filter, the ids
	// (JSON text, at most MaxAuditTarget bytes).
	Target string `json:"target,omitempty"`
	// Count is how many jobs (or other things) the change affected when
	// known at once; an operation's counts are its own (OperationID).
	Count int64 `json:"count"`
	// OperationID is the durable operation the change started, if any.
	OperationID string `json:"operation_id,omitempty"`
	// Note is the note given with the change.
	Note string `json:"note,omitempty"`
	// Remote is the client's address (the API) or the host (local).
	Remote string `json:"remote,omitempty"`
	// Status is the API's answer's status (0 for local).
	Status int `json:"status,omitempty"`
}

// AuditFilter selects audit entries: each set field must match.
type AuditFilter struct {
	// Actor and Action match exactly.
	Actor  string
	Action string
	// Since and Until bound At: Since <= At < Until.
	Since, Until time.Time
}

// Bounds of an audit entry's strings, in bytes.
const (
	MaxAuditTarget = 8192
	maxAuditString = 1024
)

// DefaultAuditRetention is how long audit entries are kept by default.
const DefaultAuditRetention = 90 * 24 * time.Hour

// CheckAuditEntry returns an ErrInvalid error for an entry a store
// refuses: no actor or action, strings too long or not valid UTF-8.
func CheckAuditEntry(e AuditEntry) error {
	if e.Actor == "" || e.Action == "" {
		return fmt.Errorf("%w: an audit entry needs an actor and an action", ErrInvalid)
	}
	for name, v := range map[string]string{"actor": e.Actor, "role": e.Role, "action": e.Action, "operation_id": e.OperationID, "note": e.Note, "remote": e.Remote} {
		if len(v) > maxAuditString || !utf8.ValidString(v) {
			return fmt.Errorf("%w: audit entry %s: longer than %d bytes or not valid UTF-8", ErrInvalid, name, maxAuditString)
		}
	}
	if len(e.Target) > MaxAuditTarget || !utf8.ValidString(e.Target) {
		return fmt.Errorf("%w: audit entry target: longer than %d bytes or not valid UTF-8", ErrInvalid, MaxAuditTarget)
	}
	return nil
}

// TruncateUTF8 cuts s to at most n bytes, on a character boundary.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
