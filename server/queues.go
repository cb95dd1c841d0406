package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
)

// QueueList is the body of GET /v1/queues.
// It is the type of package apiclient, the API's Go client.
type QueueList = apiclient.QueueList

// QueueBody is the body answering a pause or a resume of a queue.
// It is the type of package apiclient, the API's Go client.
type QueueBody = apiclient.QueueBody

func (a *api) listQueues(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	qs, err := a.client.Queues(r.Context())
	if err != nil {
		return err
	}
	if qs == nil {
		qs = []redrive.Queue{}
	}
	writeJSON(w, http.StatusOK, QueueList{Queues: qs})
	return nil
}

func (a *api) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	return a.setPaused(w, r, true)
}

func (a *api) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	return a.setPaused(w, r, false)
}

// setPaused pauses or resumes the queue named by the {name} path value.
func (a *api) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	name := r.PathValue("name")
	if name == "" {
		return badRequest("name", "the queue name is required")
	}
	// Pausing records the queue: its name follows the name rule.
	// Resuming takes any name stored before the rule (checked by the
	// client below), so that such a queue is not paused for good.
	if err := redrive.CheckName("queue", name); err != nil && paused {
		return &apiError{status: http.StatusBadRequest, code: "invalid", field: "name",
			msg: strings.TrimPrefix(err.Error(), redrive.ErrInvalid.Error()+": ")}
	}
	if r.ContentLength > 0 {
		// No body is expected; refuse one rather than ignore it.
		var empty struct{}
		if err := a.decodeBody(w, r, &empty); err != nil {
			return err
		}
	}
	var q redrive.Queue
	var err error
	if paused {
		q, err = a.client.PauseQueue(r.Context(), name)
	} else {
		q, err = a.client.ResumeQueue(r.Context(), name)
	}
	if errors.Is(err, redrive.ErrInvalid) {
		return &apiError{status: http.StatusBadRequest, code: "invalid", field: "name", msg: err.Error()}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, QueueBody{Queue: q})
	return nil
}

// WorkerList is the body of GET /v1/workers.
// It is the type of package apiclient, the API's Go client.
type WorkerList = apiclient.WorkerList

func (a *api) listWorkers(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	ws, err := a.client.Workers(r.Context())
	if err != nil {
		return err
	}
	if ws == nil {
		ws = []redrive.WorkerStatus{}
	}
	writeJSON(w, http.StatusOK, WorkerList{Workers: ws})
	return nil
}
