package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
)

// RedriveBody is the body of POST /v1/dlq/redrive.
// It is the type of package apiclient, the API's Go client.
type RedriveBody = apiclient.RedriveBody

func (a *api) listDead(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append(listParams, readParams...)...)
	if err != nil {
		return err
	}
	return a.list(w, r, q, "GET /v1/dlq")
}

func (a *api) groups(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"limit"}, readParams...)...)
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
	a.redactGroups(r.Context(), gs)
	writeJSON(w, http.StatusOK, map[string]any{"groups": gs})
	return nil
}

// redrive starts a bulk redrive (POST /v1/dlq/redrive[?wait=true]).
func (a *api) redrive(w http.ResponseWriter, r *http.Request) error {
	var in RedriveBody
	waitEnd, err := a.startBody(w, r, &in)
	if err != nil {
		return err
	}
	req := redrive.OperationRequest{Kind: OperationRedrive, Rate: in.Rate, Note: in.Note, Batch: in.Batch}
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
		f, err := toFilter(*in.Filter, "filter.")
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
		// Editing payloads is the admin's.
		if p := principalOf(r.Context()); p.role < RoleAdmin {
			return forbidden(p, RoleAdmin, "a redrive with a payload (an edit)")
		}
		if req.Payload, err = a.restorePayload(r.Context(), in.Payload, in.IDs); err != nil {
			return err
		}
	}
	if err := parseBatch(in.Batch); err != nil {
		return err
	}
	op, err := a.ops.start(requestTrace(r), req)
	if err != nil {
		return err
	}
	return a.answerStarted(w, r, op, waitEnd)
}

// purge starts a purge (DELETE /v1/dlq?filters[&all=true][&wait=true]).
func (a *api) purge(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"all", "wait", "id"}, filterParams...)...)
	if err != nil {
		return err
	}
	all, err := q.parseBool("all")
	if err != nil {
		return err
	}
	waitEnd, err := q.parseBool("wait")
	if err != nil {
		return err
	}
	f, err := q.filter()
	if err != nil {
		return err
	}
	ids, err := q.ids("id")
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		switch {
		case all:
			return badRequest("all", "all applies to a filter, not to ids")
		case !emptyFilter(f):
			return badRequest("id", "give ids or a filter, not both")
		}
		f.IDs = ids
	}
	if emptyFilter(f) && !all {
		return &apiError{status: http.StatusBadRequest, code: "filter_required", field: "all",
			msg: "the filter is empty and would purge every dead job; narrow it or pass all=true"}
	}
	op, err := a.ops.start(r.Context(), redrive.OperationRequest{Kind: OperationPurge, Filter: f})
	if err != nil {
		return err
	}
	return a.answerStarted(w, r, op, waitEnd)
}

// ExportLine is one line of GET /v1/dlq/export.
// It is the type of package apiclient, the API's Go client.
type ExportLine = apiclient.ExportLine

// exportPage is how many dead jobs the export reads at a time.
const exportPage = 200

// export streams the dead jobs matching the filters as NDJSON, one
// ExportLine per job, reading them by keyset pages so that memory stays
// bounded whatever their number. X-Total-Count says how many matched at
// the start. An error after the first byte aborts the connection, so a
// client never takes a cut stream for a complete one.
func (a *api) export(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{revealParam, decryptParam}, readParams...)...)
	if err != nil {
		return err
	}
	f, err := q.filter()
	if err != nil {
		return err
	}
	f.States = []redrive.State{redrive.Dead}
	// decrypt=true shows the payloads as they are, secrets included: it
	// is recorded once, as the reveal it implies.
	decrypt, err := a.decrypt(r, q, "GET /v1/dlq/export")
	if err != nil {
		return err
	}
	reveal := decrypt
	if !decrypt {
		if reveal, err = a.reveal(r, q, "GET /v1/dlq/export"); err != nil {
			return err
		}
	}
	ctx := r.Context()
	total, err := a.client.Count(ctx, f)
	if err != nil {
		return err
	}
	page := redrive.Page{Limit: exportPage}
	res, err := a.client.List(ctx, f, page)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Total-Count", strconv.FormatInt(total, 10))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	n := 0
	for {
		for _, j := range res.Jobs {
			// A reader that takes in nothing for writeTimeout is cut off;
			// one that keeps reading gets the whole export.
			_ = rc.SetWriteDeadline(time.Now().Add(a.writeTimeout))
			// The payload's export form is taken from the plaintext
			// (sealed, or not), before the redaction masks it.
			p, _, sealed, err := a.client.Exported(j, decrypt)
			if err != nil {
				a.log.Error("export aborted", "exported", n, "err", err)
				panic(http.ErrAbortHandler)
			}
			if !reveal {
				// The texts are scrubbed of the payload's secrets
				// whether the payload is sealed or not.
				a.redactJob(j)
			}
			if sealed.PayloadSealed != "" {
				j.Payload, j.Summary = p, ""
			}
			e, m := redrive.ExportedFiles(j)
			m.PayloadSealed = sealed.PayloadSealed
			if err := enc.Encode(ExportLine{Job: j, Error: e, Metadata: m}); err != nil {
				// The client went away.
				a.log.Info("export stopped: the client went away", "exported", n, "err", err)
				return nil
			}
			n++
		}
		if res.Next == "" {
			return nil
		}
		_ = rc.Flush()
		page.Cursor = res.Next
		if res, err = a.client.List(ctx, f, page); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.log.Error("export aborted", "exported", n, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}
