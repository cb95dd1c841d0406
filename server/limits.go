package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/store"
)

// LimitList is the body of GET /v1/limits.
// It is the type of package apiclient, the API's Go client.
type LimitList = apiclient.LimitList

// LimitBody is the body answering PUT /v1/limits/{name}.
// It is the type of package apiclient, the API's Go client.
type LimitBody = apiclient.LimitBody

// MaxLimitGroups bounds the groups parameter of GET /v1/limits.
const MaxLimitGroups = 100

// listLimits lists the limits with their use; with groups=N, each limit
// with running jobs also lists its N busiest groups (busiest_groups).
func (a *api) listLimits(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "groups")
	if err != nil {
		return err
	}
	groups := 0
	if s := q.get("groups"); s != "" {
		groups, err = strconv.Atoi(s)
		if err != nil || groups < 1 || groups > MaxLimitGroups {
			return badRequest("groups", "groups must be an integer from 1 to %d, got %q", MaxLimitGroups, clip(s))
		}
	}
	ls, err := a.client.LimitStates(r.Context())
	if err != nil {
		return err
	}
	if ls == nil {
		ls = []store.LimitState{}
	}
	for i := range ls {
		if groups == 0 || ls[i].InUse == 0 {
			continue
		}
		if ls[i].BusiestGroups, err = a.client.LimitGroups(r.Context(), ls[i].Name, groups); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, LimitList{Limits: ls})
	return nil
}

// setLimit changes, fleet-wide, the max, the rate, the hold on
// Retry-After, or several, of the limit the {name} path value names
// (creating it if there is none, unless only the hold is given), all in
// one transaction of the store: either every change takes effect or none
// does. Every field is checked before anything is stored: a bad one is a
// 400 naming it. Max 0 removes the cap of a limit that keeps a rate; a rate without
// a burst keeps the limit's burst.
func (a *api) setLimit(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := redrive.CheckName("limit name", name); err != nil {
		return &apiError{status: http.StatusBadRequest, code: "invalid", field: "name",
			msg: strings.TrimPrefix(err.Error(), redrive.ErrInvalid.Error()+": ")}
	}
	var body apiclient.LimitSet
	if err := a.decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.Max == nil && body.Rate == nil && body.HoldOnRetryAfter == nil {
		if body.Burst != nil {
			return badRequest("burst", "burst goes with a rate: give rate too (e.g. \"rate\": \"50/s\", \"burst\": 10)")
		}
		return badRequest("max", "max, rate or hold_on_retry_after is required: max is how many jobs of one group may run at once, 1 to %d (0: no cap, with a rate); rate how many start per interval, e.g. 50/s", store.MaxLimit)
	}
	if body.Max != nil && *body.Max != 0 {
		if err := store.CheckLimitMax(*body.Max); err != nil {
			return badRequest("max", "max %d is out of range [1, %d] (or 0 for no cap, with a rate)", *body.Max, store.MaxLimit)
		}
	}
	var rate store.LimitRate
	if body.Rate != nil {
		var err error
		if rate, err = redrive.ParseRate(*body.Rate); err != nil {
			return fieldError(err)
		}
		if body.Burst != nil {
			if rate.N == 0 {
				return badRequest("burst", "burst goes with a rate, not with none")
			}
			rate.Burst = *body.Burst
			if err := store.CheckLimitRate(rate); err != nil {
				return badRequest("burst", "burst %d is out of range [1, %d]", *body.Burst, store.MaxBurst)
			}
		}
	} else if body.Burst != nil {
		return badRequest("burst", "burst goes with a rate: give rate too (e.g. \"rate\": \"50/s\", \"burst\": 10)")
	}
	if body.Max != nil && *body.Max == 0 && body.Rate != nil && rate.IsZero() {
		return badRequest("max", "max 0 and rate none would leave the limit no limit: keep a max or a rate")
	}
	// One change of the store, in one transaction: a failure of any part
	// leaves the limit as it was.
	ch := store.LimitChange{Max: body.Max, Hold: body.HoldOnRetryAfter}
	if body.Rate != nil {
		ch.Rate = &rate
	}
	st, err := a.client.ChangeLimit(r.Context(), name, ch)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found",
			msg: fmt.Sprintf("limit %q is not in the store yet (no job has used it): give it a max or a rate with the hold", clip(name))}
	}
	if err := fieldError(err); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, LimitBody{Limit: st})
	return nil
}

// fieldError makes a *redrive.FieldError a 400 naming its field; other
// errors are returned as they are.
func fieldError(err error) error {
	var fe *redrive.FieldError
	if errors.As(err, &fe) {
		return &apiError{status: http.StatusBadRequest, code: "invalid", field: fe.Field,
			msg: strings.TrimPrefix(fe.Err.Error(), redrive.ErrInvalid.Error()+": ")}
	}
	return err
}
