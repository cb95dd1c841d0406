package apiclient

import (
	"context"
	"net/url"
	"strconv"

	"github.com/redrivehq/redrive/store"
)

// AuditList is the answer to GET /v1/audit.
type AuditList struct {
	Entries []store.AuditEntry `json:"entries"`
	// Next is the before of the next page; "" on the last.
	Next string `json:"next,omitempty"`
}

// AuditQuery selects audit entries (GET /v1/audit): each set field must
// match; Since and Until are RFC 3339 times or durations ago.
type AuditQuery struct {
	Actor, Action, Since, Until string
	// Before is the next page (AuditList.Next); Limit bounds the page.
	Before string
	Limit  int
}

// Audit lists audit log entries, newest first (GET /v1/audit).
func (c *Client) Audit(ctx context.Context, q AuditQuery) (AuditList, error) {
	v := url.Values{}
	for k, s := range map[string]string{"actor": q.Actor, "action": q.Action, "since": q.Since, "until": q.Until, "before": q.Before} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var l AuditList
	return l, c.get(ctx, "/v1/audit", v, &l)
}
