package server

import (
	"net/http"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
)

// CountResponse is the answer of GET /v1/jobs/count and GET
// /v1/dlq/count.
// It is the type of package apiclient, the API's Go client.
type CountResponse = apiclient.CountResponse

// countJobs answers how many jobs GET /v1/jobs would list with the same
// filter (GET /v1/jobs/count).
func (a *api) countJobs(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"state", "match"}, readParams...)...)
	if err != nil {
		return err
	}
	return a.count(w, r, q, false)
}

// countDead answers how many dead jobs GET /v1/dlq would list with the
// same filter, which is what DELETE /v1/dlq would purge and POST
// /v1/dlq/redrive with that filter would redrive (GET /v1/dlq/count).
func (a *api) countDead(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"match"}, readParams...)...)
	if err != nil {
		return err
	}
	return a.count(w, r, q, true)
}

// count answers a count; dead restricts it to the DLQ.
func (a *api) count(w http.ResponseWriter, r *http.Request, q *query, dead bool) error {
	f, err := q.filter()
	if err != nil {
		return err
	}
	if dead {
		f.States = []redrive.State{redrive.Dead}
	}
	if err := q.match(&f); err != nil {
		return err
	}
	n, err := a.client.Count(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, CountResponse{Count: n})
	return nil
}
