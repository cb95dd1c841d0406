package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// BreakerView is one circuit breaker in GET /v1/breakers.
// It is the type of package apiclient, the API's Go client.
type BreakerView = apiclient.BreakerView

// BreakerBody is the body answering a force-open or a reset.
// It is the type of package apiclient, the API's Go client.
type BreakerBody = apiclient.BreakerBody

// breakerOpenRequest is the optional body of POST /v1/breakers/{name}/open.
type breakerOpenRequest = apiclient.BreakerOpenRequest

// MaxForcedOpen bounds the duration of a forced open.
const MaxForcedOpen = 366 * 24 * time.Hour

func (a *api) listBreakers(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	var fleet []store.BreakerState
	if a.client != nil {
		var err error
		if fleet, err = a.client.Store().ListBreakers(r.Context()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, a.breakerViews(fleet, time.Now()))
	return nil
}

// breakerViews merges the fleet's breakers with this process's, sorted by
// name.
func (a *api) breakerViews(fleet []store.BreakerState, now time.Time) []BreakerView {
	local := map[string]breaker.Status{}
	fallback := false
	if a.breakers != nil {
		for _, st := range a.breakers.Statuses() {
			local[st.Name] = st
		}
		if s := a.breakers.Shared(); s != nil {
			fallback = s.Fallback()
		}
	}
	out := []BreakerView{}
	for _, f := range fleet {
		v := fleetView(f, now)
		v.Fallback = fallback
		if st, ok := local[f.Name]; ok {
			v.Local = &st
			delete(local, f.Name)
		}
		out = append(out, v)
	}
	for _, st := range local {
		out = append(out, BreakerView{Name: st.Name, State: st.State, Failures: st.Failures, Requests: st.Requests,
			OpenedAt: st.OpenedAt, ReadyAt: st.ReadyAt, Trips: st.Trips, Fallback: fallback, Local: &st})
	}
	slices.SortFunc(out, func(a, b BreakerView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// FleetBreakers returns the store's shared breakers as GET /v1/breakers
// shows them at now, for a process without breakers of its own (the CLI
// working on the store).
func FleetBreakers(states []store.BreakerState, now time.Time) []BreakerView {
	out := make([]BreakerView, 0, len(states))
	for _, st := range states {
		out = append(out, fleetView(st, now))
	}
	return out
}

// FleetBreaker is FleetBreakers for one breaker.
func FleetBreaker(st store.BreakerState, now time.Time) BreakerView { return fleetView(st, now) }

// fleetView is a shared breaker as the API shows it at now.
func fleetView(f store.BreakerState, now time.Time) BreakerView {
	v := BreakerView{Name: f.Name, Since: f.Since, OpenedAt: f.OpenedAt, OpenedBy: f.OpenedBy, Forced: f.Forced,
		Trips: uint64(max(f.Trips, 0)), Shared: true}
	switch f.State {
	case store.BreakerOpen:
		v.State, v.ReadyAt = breaker.Open, f.ReadyAt
		if !f.ReadyAt.IsZero() && !now.Before(f.ReadyAt) {
			v.State, v.ReadyAt = breaker.HalfOpen, time.Time{}
		}
	case store.BreakerHalfOpen:
		v.State, v.ProbeBy, v.ProbeUntil = breaker.HalfOpen, f.ProbeBy, f.ProbeUntil
	default:
		v.State = breaker.Closed
		v.Failures, v.Requests = f.Totals(now)
	}
	return v
}

// FormatDuration words d as ParseDuration reads it: whole days as "7d",
// anything else as a Go duration ("1h30m0s").
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// breakerName reads and checks the {name} path value.
func breakerName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := store.CheckBreakerName(name); err != nil {
		return "", badRequest("name", "%s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
	}
	return name, nil
}

// openBreaker forces a breaker open for the fleet, for the optional
// duration of the body.
func (a *api) openBreaker(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	name, err := breakerName(r)
	if err != nil {
		return err
	}
	// Opening creates the breaker's record: its name follows the name
	// rule. Closing (and deleting) takes any name stored before the rule.
	if err := store.CheckName("breaker name", name); err != nil {
		return badRequest("name", "%s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
	}
	var req breakerOpenRequest
	if r.ContentLength != 0 {
		if err := a.decodeBody(w, r, &req); err != nil {
			return err
		}
	}
	now := time.Now()
	set := store.BreakerSet{Name: name, State: store.BreakerOpen, By: "operator (api)", Now: now}
	if req.Duration != "" {
		d, ok := ParseDuration(req.Duration)
		switch {
		case !ok:
			return badRequest("duration", "duration %q is not a duration such as 10m, 1h30m or 7d", clip(req.Duration))
		case d <= 0 || d > MaxForcedOpen:
			return badRequest("duration", "duration %s must be positive and at most %s", FormatDuration(d), FormatDuration(MaxForcedOpen))
		}
		set.Until = now.Add(d)
	}
	return a.setBreaker(w, r, set)
}

// resetBreaker closes a breaker for the fleet.
func (a *api) resetBreaker(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	name, err := breakerName(r)
	if err != nil {
		return err
	}
	if r.ContentLength > 0 {
		var empty struct{}
		if err := a.decodeBody(w, r, &empty); err != nil {
			return err
		}
	}
	if err := a.breakerKnown(r, name); err != nil {
		return err
	}
	return a.setBreaker(w, r, store.BreakerSet{Name: name, State: store.BreakerClosed, By: "operator (api)", Now: time.Now()})
}

// breakerKnown returns nil when a breaker named name exists: in the store
// (shared by a process, or forced by an operator) or in this process.
// Otherwise closing it would create a record for a breaker nobody has:
// 404 not_found on the field name.
func (a *api) breakerKnown(r *http.Request, name string) error {
	if a.breakers != nil {
		if _, ok := a.breakers.Lookup(name); ok {
			return nil
		}
	}
	_, err := a.client.Store().Breaker(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", field: "name", msg: NoBreakerMessage(name)}
	}
	return err
}

// NoBreakerMessage words the refusal to close a breaker named name that
// no process has: none shared it through the store, no operator forced
// it.
func NoBreakerMessage(name string) string {
	return fmt.Sprintf("no breaker named %q: no process on the store has used it, and none was forced open", name)
}

// deleteBreaker deletes a breaker's shared record (204): 404 when the
// store has none, 409 when it is in use (store.CheckBreakerDelete: open
// by trips or half-open with a probe still to come, or closed but
// changed within the idle period), unless force=true.
func (a *api) deleteBreaker(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "force")
	if err != nil {
		return err
	}
	name, err := breakerName(r)
	if err != nil {
		return err
	}
	force, err := q.parseBool("force")
	if err != nil {
		return err
	}
	if err := a.noBody(w, r); err != nil {
		return err
	}
	st, err := a.client.Store().DeleteBreaker(r.Context(), store.BreakerDelete{Name: name, Now: time.Now(), Force: force})
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", field: "name", msg: NoBreakerRecordMessage(name)}
	}
	if ie, ok := errors.AsType[*store.BreakerInUseError](err); ok {
		return &apiError{status: http.StatusConflict, code: "conflict", field: "name", msg: ie.Error()}
	}
	if err != nil {
		return err
	}
	// This process's breaker, if open by the deleted record, closes at
	// once (a missing record reads closed above the deleted version);
	// the others close at their next probe.
	if a.breakers != nil {
		if b, ok := a.breakers.Lookup(name); ok {
			b.Apply(breaker.Fleet{State: breaker.Closed, Version: st.Version + 1})
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// NoBreakerRecordMessage words the refusal to delete a breaker the store
// has no record of.
func NoBreakerRecordMessage(name string) string {
	return fmt.Sprintf("no breaker named %q in the store: no process on the store shares it, and none was forced open", name)
}

func (a *api) setBreaker(w http.ResponseWriter, r *http.Request, set store.BreakerSet) error {
	st, err := a.client.Store().SetBreaker(r.Context(), set)
	if err != nil {
		return err
	}
	// This process's breaker follows at once; the others at their next
	// sync (a notification, or a poll of the store).
	if a.breakers != nil {
		if b, ok := a.breakers.Lookup(set.Name); ok {
			if set.State == store.BreakerClosed {
				b.Apply(breaker.Fleet{State: breaker.Closed, Version: st.Version})
			} else {
				b.Apply(breaker.Fleet{State: breaker.Open, OpenedAt: st.OpenedAt, OpenedBy: st.OpenedBy, ReadyAt: st.ReadyAt, Version: st.Version})
			}
		}
	}
	views := a.breakerViews([]store.BreakerState{st}, time.Now())
	for _, v := range views {
		if v.Name == set.Name {
			writeJSON(w, http.StatusOK, BreakerBody{Breaker: v})
			return nil
		}
	}
	writeJSON(w, http.StatusOK, BreakerBody{Breaker: fleetView(st, time.Now())})
	return nil
}
