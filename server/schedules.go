package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
)

// ScheduleList is the body of GET /v1/schedules.
// It is the type of package apiclient, the API's Go client.
type ScheduleList = apiclient.ScheduleList

// ScheduleBody is the body answering GET /v1/schedules/{name}, a pause
// and a resume.
// It is the type of package apiclient, the API's Go client.
type ScheduleBody = apiclient.ScheduleBody

func (a *api) listSchedules(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	list, err := a.client.Schedules(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []redrive.ScheduleInfo{}
	}
	for i := range list {
		a.redactSchedule(&list[i])
	}
	writeJSON(w, http.StatusOK, ScheduleList{Schedules: list})
	return nil
}

// scheduleName returns the {name} path value, checked by the name rule,
// or a name the rule refuses under which a schedule is stored (from
// before the rule): no route creates a schedule, and such a schedule
// must stay reachable to be paused or deleted.
func (a *api) scheduleName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if name == "" {
		return "", badRequest("name", "the schedule name is required")
	}
	if err := redrive.CheckName("schedule name", name); err != nil {
		if _, gerr := a.client.Schedule(r.Context(), name); gerr == nil {
			return name, nil
		}
		return "", &apiError{status: http.StatusBadRequest, code: "invalid", field: "name",
			msg: strings.TrimPrefix(err.Error(), redrive.ErrInvalid.Error()+": ")}
	}
	return name, nil
}

// scheduleNotFound words ErrNotFound for a schedule.
func scheduleNotFound(err error, name string) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", field: "name", msg: "schedule " + quoteName(name) + " not found"}
	}
	return err
}

// quoteName quotes a name for a message, shortened.
func quoteName(name string) string {
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(name, "\uFFFD") + `"`
}

func (a *api) getSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := a.scheduleName(r)
	if err != nil {
		return err
	}
	if _, err := newQuery(r); err != nil {
		return err
	}
	s, err := a.client.Schedule(r.Context(), name)
	if err != nil {
		return scheduleNotFound(err, name)
	}
	a.redactSchedule(&s)
	writeJSON(w, http.StatusOK, ScheduleBody{Schedule: s})
	return nil
}

// noBody refuses a body on a request that takes none, rather than
// ignore it.
func (a *api) noBody(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength > 0 {
		var empty struct{}
		return a.decodeBody(w, r, &empty)
	}
	return nil
}

func (a *api) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	return a.setSchedulePaused(w, r, true)
}

func (a *api) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	return a.setSchedulePaused(w, r, false)
}

// setSchedulePaused pauses or resumes the schedule named by {name}.
func (a *api) setSchedulePaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	name, err := a.scheduleName(r)
	if err != nil {
		return err
	}
	if err := a.noBody(w, r); err != nil {
		return err
	}
	var s redrive.ScheduleInfo
	if paused {
		s, err = a.client.PauseSchedule(r.Context(), name)
	} else {
		s, err = a.client.ResumeSchedule(r.Context(), name)
	}
	if err != nil {
		return scheduleNotFound(err, name)
	}
	if paused {
		a.log.Info("schedule paused", "schedule", name)
	} else {
		a.log.Info("schedule resumed", "schedule", name)
	}
	a.redactSchedule(&s)
	writeJSON(w, http.StatusOK, ScheduleBody{Schedule: s})
	return nil
}

// triggerSchedule enqueues one job of the schedule now and answers it
// (201).
func (a *api) triggerSchedule(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	name, err := a.scheduleName(r)
	if err != nil {
		return err
	}
	if err := a.noBody(w, r); err != nil {
		return err
	}
	j, err := a.client.TriggerSchedule(r.Context(), name)
	if err != nil {
		return scheduleNotFound(err, name)
	}
	a.redactJob(j)
	writeJSON(w, http.StatusCreated, j)
	return nil
}

// deleteSchedule deletes the schedule named by {name} (204).
func (a *api) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := a.scheduleName(r)
	if err != nil {
		return err
	}
	if _, err := newQuery(r); err != nil {
		return err
	}
	if err := a.client.DeleteSchedule(r.Context(), name); err != nil {
		if de, ok := errors.AsType[*redrive.ScheduleDeclaredError](err); ok {
			return &apiError{status: http.StatusConflict, code: "conflict", field: "name", msg: de.Error()}
		}
		return scheduleNotFound(err, name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
