package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/redrivehq/redrive"
)

// maxSyncRedrive bounds how long a rate-bounded redrive may hold its
// request: a redrive whose pace would take longer is refused, so that an
// HTTP request never waits for hours.
var maxSyncRedrive = 10 * time.Minute

// RedriveBody is the body of POST /v1/dlq/redrive. Exactly one of IDs
// and Filter selects the dead jobs; an empty filter needs All.
type RedriveBody struct {
	IDs    []int64     `json:"ids"`
	Filter *FilterBody `json:"filter"`
	// All confirms a redrive of every dead job (an empty filter).
	All bool `json:"all"`
	// Rate bounds the redrive in jobs per second (0: no bound).
	Rate float64 `json:"rate"`
	// Payload, when present and not null, replaces each job's payload.
	Payload json.RawMessage `json:"payload"`
	// Note is recorded in each job's history.
	Note string `json:"note"`
}

func (a *api) listDead(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"cursor", "limit"}, filterParams...)...)
	if err != nil {
		return err
	}
	return a.list(w, r, q, true)
}

func (a *api) groups(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"limit"}, filterParams...)...)
	if err != nil {
		return err
	}
	f, err := q.filter()
	if err != nil {
		return err
	}
	n, err := q.limit()
	if err != nil {
		return err
	}
	gs, err := a.client.DeadGroups(r.Context(), f, n)
	if err != nil {
		return err
	}
	if gs == nil {
		gs = []redrive.Group{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"groups": gs})
	return nil
}

func (a *api) redrive(w http.ResponseWriter, r *http.Request) error {
	var in RedriveBody
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	req := redrive.RedriveRequest{Rate: in.Rate, Note: in.Note}
	switch {
	case len(in.IDs) > 0 && in.Filter != nil:
		return badRequest("filter", "give ids or filter, not both")
	case len(in.IDs) > 0:
		if in.All {
			return badRequest("all", "all applies to a filter, not to ids")
		}
		if len(in.IDs) > MaxRedriveIDs {
			return badRequest("ids", "ids holds %d ids, the limit is %d; redrive by filter instead", len(in.IDs), MaxRedriveIDs)
		}
		for _, id := range in.IDs {
			if id <= 0 {
				return badRequest("ids", "job ids must be positive, got %d", id)
			}
		}
		req.IDs = in.IDs
	case in.Filter != nil:
		f, err := in.Filter.toFilter("filter.")
		if err != nil {
			return err
		}
		if emptyFilter(f) && !in.All {
			return &apiError{status: http.StatusBadRequest, code: "filter_required", field: "filter",
				msg: "the filter is empty and would redrive every dead job; narrow it or set \"all\": true"}
		}
		req.Filter = f
	case in.All:
		// Every dead job.
	default:
		return &apiError{status: http.StatusBadRequest, code: "filter_required", field: "ids",
			msg: "say which dead jobs to redrive: ids, a filter, or \"all\": true"}
	}
	if err := parseRate(in.Rate); err != nil {
		return err
	}
	if err := checkName("note", in.Note, MaxNote); err != nil {
		return err
	}
	if !isNull(in.Payload) {
		req.Payload = in.Payload
	}
	if req.Rate > 0 {
		n := int64(len(req.IDs))
		if n == 0 {
			f := req.Filter
			f.States = []redrive.State{redrive.Dead}
			var err error
			if n, err = a.client.Count(r.Context(), f); err != nil {
				return err
			}
		}
		if est := time.Duration(float64(max(n-1, 0)) / req.Rate * float64(time.Second)); est > maxSyncRedrive {
			return badRequest("rate", "at %g jobs per second the %d selected jobs would take %s, and one request may take at most %s: raise the rate or narrow the selection",
				req.Rate, n, est.Round(time.Second), maxSyncRedrive)
		}
	}
	prog, err := a.client.Redrive(r.Context(), req)
	if err != nil {
		return payloadError(err, "payload")
	}
	writeJSON(w, http.StatusOK, prog)
	return nil
}

func (a *api) purge(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"all"}, filterParams...)...)
	if err != nil {
		return err
	}
	all := false
	switch v := q.get("all"); v {
	case "", "false":
	case "true":
		all = true
	default:
		return badRequest("all", "all must be true or false, got %q", clip(v))
	}
	f, err := q.filter()
	if err != nil {
		return err
	}
	if emptyFilter(f) && !all {
		return &apiError{status: http.StatusBadRequest, code: "filter_required", field: "all",
			msg: "the filter is empty and would purge every dead job; narrow it or pass all=true"}
	}
	n, err := a.client.Purge(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int64{"purged": n})
	return nil
}
