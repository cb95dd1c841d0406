package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// The worker protocol (docs/worker-protocol.md): workers in other
// languages lease jobs, heartbeat them and report their outcomes. The
// handlers only read and answer; redrive.RemoteWorkers decides.

// LeaseBody is the body of POST /v1/worker/lease.
type LeaseBody struct {
	Worker       string            `json:"worker"`
	Host         string            `json:"host,omitempty"`
	PID          int               `json:"pid,omitempty"`
	Queues       []string          `json:"queues"`
	Kinds        []string          `json:"kinds"`
	Dependencies map[string]string `json:"dependencies,omitempty"`
	Timeouts     map[string]string `json:"timeouts,omitempty"`
	Max          int               `json:"max,omitempty"`
	Wait         string            `json:"wait,omitempty"`
	// Request names the call; Resend and Held mark a call sent again
	// after its answer was lost (see redrive.LeaseRequest).
	Request string     `json:"request,omitempty"`
	Resend  bool       `json:"resend,omitempty"`
	Held    []JobLease `json:"held,omitempty"`
}

// LeasedJob is a job handed to a remote worker.
type LeasedJob struct {
	ID         int64           `json:"id"`
	Lease      int64           `json:"lease"`
	Queue      string          `json:"queue"`
	Kind       string          `json:"kind"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	MaxRetries int             `json:"max_retries"`
	Priority   int             `json:"priority"`
	LeaseUntil time.Time       `json:"lease_until"`
	Deadline   *time.Time      `json:"deadline,omitempty"`
	Trace      string          `json:"trace,omitempty"`
	EnqueuedAt time.Time       `json:"enqueued_at"`
}

// LeaseAnswer is the answer of POST /v1/worker/lease.
type LeaseAnswer struct {
	Jobs []LeasedJob `json:"jobs"`
	// Lease is the lease duration and HeartbeatEvery how often to
	// heartbeat, as Go durations ("30s", "10s").
	Lease          string `json:"lease"`
	HeartbeatEvery string `json:"heartbeat_every"`
}

// HeartbeatBody is the body of POST /v1/worker/heartbeat.
type HeartbeatBody struct {
	Worker string          `json:"worker"`
	Jobs   []HeartbeatItem `json:"jobs"`
}

// HeartbeatItem is one job a heartbeat names.
type HeartbeatItem struct {
	ID       int64          `json:"id"`
	Lease    int64          `json:"lease"`
	Progress *ProgressValue `json:"progress,omitempty"`
}

// ProgressValue is how far a running attempt is.
type ProgressValue struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
}

// HeartbeatAnswer is the answer of POST /v1/worker/heartbeat.
type HeartbeatAnswer struct {
	Jobs []HeartbeatStatus `json:"jobs"`
}

// HeartbeatStatus is what a heartbeat says of one job.
type HeartbeatStatus struct {
	ID         int64      `json:"id"`
	Lease      int64      `json:"lease"`
	Held       bool       `json:"held"`
	Canceled   bool       `json:"canceled"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// CancelsBody is the body of POST /v1/worker/cancels.
type CancelsBody struct {
	Worker string `json:"worker"`
	Wait   string `json:"wait,omitempty"`
}

// CancelsAnswer is the answer of POST /v1/worker/cancels.
type CancelsAnswer struct {
	Canceled []JobLease `json:"canceled"`
}

// JobLease names one lease of a job.
type JobLease struct {
	ID    int64 `json:"id"`
	Lease int64 `json:"lease"`
}

// OutcomeItem is one outcome a remote worker reports.
type OutcomeItem struct {
	ID         int64           `json:"id"`
	Lease      int64           `json:"lease"`
	Outcome    string          `json:"outcome"`
	Result     json.RawMessage `json:"result,omitempty"`
	Class      string          `json:"class,omitempty"`
	Error      string          `json:"error,omitempty"`
	Cause      string          `json:"cause,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	RetryAfter string          `json:"retry_after,omitempty"`
	Dependency string          `json:"dependency,omitempty"`
	Delay      string          `json:"delay,omitempty"`
}

// OutcomesBody is the body of POST /v1/worker/outcomes.
type OutcomesBody struct {
	Worker   string        `json:"worker"`
	Outcomes []OutcomeItem `json:"outcomes"`
}

// OneOutcomeBody is the body of POST /v1/worker/jobs/{id}/outcome: one
// outcome, its job named by the path.
type OneOutcomeBody struct {
	Worker     string          `json:"worker"`
	Lease      int64           `json:"lease"`
	Outcome    string          `json:"outcome"`
	Result     json.RawMessage `json:"result,omitempty"`
	Class      string          `json:"class,omitempty"`
	Error      string          `json:"error,omitempty"`
	Cause      string          `json:"cause,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	RetryAfter string          `json:"retry_after,omitempty"`
	Dependency string          `json:"dependency,omitempty"`
	Delay      string          `json:"delay,omitempty"`
}

// OutcomeStatus is what became of one reported outcome.
type OutcomeStatus struct {
	ID     int64        `json:"id"`
	Lease  int64        `json:"lease"`
	Status int          `json:"status"`
	State  store.State  `json:"state,omitempty"`
	RunAt  *time.Time   `json:"run_at,omitempty"`
	Error  *errorDetail `json:"error,omitempty"`
}

// OutcomesAnswer is the answer of POST /v1/worker/outcomes.
type OutcomesAnswer struct {
	Outcomes []OutcomeStatus `json:"outcomes"`
}

// StopBody is the body of POST /v1/worker/stop.
type StopBody struct {
	Worker string `json:"worker"`
}

// Bounds of the worker protocol's strings.
const (
	// maxWorkerError bounds a fail's error and cause (the engine keeps
	// at most its MaxErrorLength of them).
	maxWorkerError = 64 << 10
)

// remote returns the worker protocol, or an error when serve runs
// without it.
func (a *api) remote() (*redrive.RemoteWorkers, error) {
	if a.workers == nil {
		return nil, &apiError{status: http.StatusNotFound, code: "worker_protocol_off",
			msg: "this server does not run the worker protocol"}
	}
	return a.workers, nil
}

// checkWorker validates the worker name of a body.
func checkWorker(name string) error {
	if err := redrive.CheckRemoteWorker(name); err != nil {
		return badRequest("worker", "worker must be 1 to 100 characters of A-Z a-z 0-9 . _ : @ -, got %q", clip(name))
	}
	return nil
}

// parseWait reads a long-poll's wait (def when empty).
func parseWait(field, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > redrive.MaxRemoteWait {
		return 0, badRequest(field, "%s must be a duration from 0s to %s such as \"30s\", got %q", field, redrive.MaxRemoteWait, clip(v))
	}
	return d, nil
}

// ParseLease reads and checks a lease body.
func ParseLease(in *LeaseBody) (redrive.LeaseRequest, error) {
	var q redrive.LeaseRequest
	if err := checkWorker(in.Worker); err != nil {
		return q, err
	}
	if err := checkName("host", in.Host, maxName); err != nil {
		return q, err
	}
	if in.PID < 0 {
		return q, badRequest("pid", "pid must be a positive integer, got %d", in.PID)
	}
	if len(in.Queues) == 0 {
		return q, badRequest("queues", "queues must name at least one queue")
	}
	if len(in.Queues) > 100 {
		return q, badRequest("queues", "queues names at most 100 queues, got %d", len(in.Queues))
	}
	for i, name := range in.Queues {
		if err := redrive.CheckName("queue", name); err != nil {
			return q, badRequest(fmt.Sprintf("queues[%d]", i), "%v", err)
		}
	}
	if len(in.Kinds) == 0 {
		return q, badRequest("kinds", "kinds must name at least one kind: the kinds this worker handles")
	}
	if len(in.Kinds) > 1000 {
		return q, badRequest("kinds", "kinds names at most 1000 kinds, got %d", len(in.Kinds))
	}
	for i, k := range in.Kinds {
		if err := redrive.CheckName("kind", k); err != nil {
			return q, badRequest(fmt.Sprintf("kinds[%d]", i), "%v", err)
		}
	}
	if len(in.Dependencies) > 1000 {
		return q, badRequest("dependencies", "dependencies names at most 1000 kinds, got %d", len(in.Dependencies))
	}
	for k, dep := range in.Dependencies {
		if err := redrive.CheckName("kind", k); err != nil {
			return q, badRequest("dependencies", "%v", err)
		}
		if err := redrive.CheckName("dependency", dep); err != nil {
			return q, badRequest("dependencies."+k, "%v", err)
		}
	}
	if len(in.Timeouts) > 1000 {
		return q, badRequest("timeouts", "timeouts names at most 1000 kinds, got %d", len(in.Timeouts))
	}
	for k, v := range in.Timeouts {
		if err := redrive.CheckName("kind", k); err != nil {
			return q, badRequest("timeouts", "%v", err)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxDelay {
			return q, badRequest("timeouts."+k, "a timeout is a duration from 0s (none) to %s such as \"30s\", got %q", maxDelay, clip(v))
		}
		if q.Timeouts == nil {
			q.Timeouts = map[string]time.Duration{}
		}
		q.Timeouts[k] = d
	}
	q.Max = in.Max
	if q.Max == 0 {
		q.Max = 1
	}
	if q.Max < 1 || q.Max > redrive.MaxRemoteLease {
		return q, badRequest("max", "max must be from 1 to %d, got %d", redrive.MaxRemoteLease, in.Max)
	}
	wait, err := parseWait("wait", in.Wait, 0)
	if err != nil {
		return q, err
	}
	if in.Request != "" {
		if err := redrive.CheckLeaseRequestID(in.Request); err != nil {
			return q, badRequest("request", "request must be 1 to 64 characters of A-Z a-z 0-9 . _ : -, got %q", clip(in.Request))
		}
	}
	if in.Resend && in.Request == "" {
		return q, badRequest("request", "a lease sent again (resend) names its request: the id of the call whose answer was lost")
	}
	if len(in.Held) > 0 && !in.Resend {
		return q, badRequest("held", "held applies to a lease sent again (resend: true) only")
	}
	if len(in.Held) > redrive.MaxRemoteHeldList {
		return q, badRequest("held", "held lists at most %d leases, got %d", redrive.MaxRemoteHeldList, len(in.Held))
	}
	for i, l := range in.Held {
		if l.ID <= 0 || l.Lease <= 0 {
			return q, badRequest(fmt.Sprintf("held[%d]", i), "held names jobs by their id and lease token, got id %d lease %d", l.ID, l.Lease)
		}
		q.Held = append(q.Held, store.Lease{JobID: l.ID, Token: l.Lease})
	}
	q.Request, q.Resend = in.Request, in.Resend
	q.Worker, q.Host, q.PID, q.Queues, q.Kinds, q.Dependencies, q.Wait = in.Worker, in.Host, in.PID, in.Queues, in.Kinds, in.Dependencies, wait
	return q, nil
}

// workerBody makes the checks every worker route makes, in this order
// (no query parameter, the protocol on in this serve) and reads the
// request's body into in; it returns the remote workers.
func (a *api) workerBody(w http.ResponseWriter, r *http.Request, in any) (*redrive.RemoteWorkers, error) {
	if _, err := newQuery(r); err != nil {
		return nil, err
	}
	rw, err := a.remote()
	if err != nil {
		return nil, err
	}
	if err := a.decodeBody(w, r, in); err != nil {
		return nil, err
	}
	return rw, nil
}

func (a *api) workerLease(w http.ResponseWriter, r *http.Request) error {
	var in LeaseBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	q, err := ParseLease(&in)
	if err != nil {
		return err
	}
	// The answer is written within the call, so that a copy of it sent
	// again waits for it: the jobs of an answer that could not be
	// written are handed back, and never reach two answers.
	answered := false
	_, err = rw.LeaseAnswer(r.Context(), q, func(jobs []*redrive.Job) error {
		answered = true
		lease := rw.LeaseDuration()
		out := LeaseAnswer{Jobs: make([]LeasedJob, len(jobs)), Lease: lease.String(), HeartbeatEvery: (lease / 3).String()}
		for i, j := range jobs {
			lj := LeasedJob{ID: j.ID, Lease: j.Lease, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, Attempt: j.Attempt,
				MaxRetries: rw.MaxRetries(j), Priority: j.Priority, Trace: j.Trace, EnqueuedAt: j.CreatedAt}
			if len(lj.Payload) == 0 {
				lj.Payload = json.RawMessage("null")
			}
			if j.LeaseUntil != nil {
				lj.LeaseUntil = *j.LeaseUntil
			}
			if d, ok := rw.Deadline(&q, j); ok {
				lj.Deadline = &d
			}
			out.Jobs[i] = lj
		}
		if err := r.Context().Err(); err != nil {
			// The worker went away as its jobs were leased: hand them
			// back rather than leave them leased to nobody until their
			// leases expire.
			return err
		}
		writeJSON(w, http.StatusOK, out)
		if len(jobs) > 0 {
			if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return err
			}
		}
		return nil
	})
	if err != nil && !answered {
		return err
	}
	return nil // an answer not written: its jobs were handed back
}

func (a *api) workerHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var in HeartbeatBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	if err := checkWorker(in.Worker); err != nil {
		return err
	}
	if len(in.Jobs) > redrive.MaxRemoteLease {
		return badRequest("jobs", "a heartbeat names at most %d jobs, got %d", redrive.MaxRemoteLease, len(in.Jobs))
	}
	beats := make([]redrive.RemoteBeat, len(in.Jobs))
	for i, it := range in.Jobs {
		beats[i] = redrive.RemoteBeat{ID: it.ID, Lease: it.Lease}
		if p := it.Progress; p != nil {
			if p.Done < 0 || p.Total < 0 {
				return badRequest(fmt.Sprintf("jobs[%d].progress", i), "progress done and total must not be negative")
			}
			beats[i].Progress = &store.JobProgress{Done: p.Done, Total: p.Total}
		}
	}
	st, err := rw.Heartbeat(r.Context(), in.Worker, beats)
	if err != nil {
		return err
	}
	out := HeartbeatAnswer{Jobs: make([]HeartbeatStatus, len(st))}
	for i, s := range st {
		hs := HeartbeatStatus{ID: s.ID, Lease: s.Lease, Held: s.Held, Canceled: s.Canceled}
		if !s.LeaseUntil.IsZero() {
			t := s.LeaseUntil
			hs.LeaseUntil = &t
		}
		out.Jobs[i] = hs
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) workerCancels(w http.ResponseWriter, r *http.Request) error {
	var in CancelsBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	if err := checkWorker(in.Worker); err != nil {
		return err
	}
	wait, err := parseWait("wait", in.Wait, 20*time.Second)
	if err != nil {
		return err
	}
	ls, err := rw.Cancels(r.Context(), in.Worker, wait)
	if err != nil {
		return err
	}
	out := CancelsAnswer{Canceled: make([]JobLease, len(ls))}
	for i, l := range ls {
		out.Canceled[i] = JobLease{ID: l.JobID, Lease: l.Token}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ParseOutcome reads and checks one outcome; field prefixes the names
// of its fields in errors ("outcomes[3]." or "").
func ParseOutcome(in *OutcomeItem, prefix string) (redrive.RemoteOutcome, error) {
	o := redrive.RemoteOutcome{ID: in.ID, Lease: in.Lease, Kind: redrive.RemoteOutcomeKind(in.Outcome)}
	if in.ID <= 0 {
		return o, badRequest(prefix+"id", "id must be a job id, got %d", in.ID)
	}
	if in.Lease <= 0 {
		return o, badRequest(prefix+"lease", "lease must be the job's lease token from the lease answer, got %d", in.Lease)
	}
	only := func(field, v string, kinds ...redrive.RemoteOutcomeKind) error {
		if v == "" {
			return nil
		}
		for _, k := range kinds {
			if o.Kind == k {
				return nil
			}
		}
		return badRequest(prefix+field, "%s does not apply to outcome %q", field, in.Outcome)
	}
	switch o.Kind {
	case redrive.RemoteComplete, redrive.RemoteFail, redrive.RemoteSnooze, redrive.RemoteRelease:
	default:
		return o, badRequest(prefix+"outcome", "outcome must be complete, fail, snooze or release, got %q", clip(in.Outcome))
	}
	for _, f := range []struct{ name, v string }{{"class", in.Class}, {"error", in.Error}, {"cause", in.Cause},
		{"reason", in.Reason}, {"retry_after", in.RetryAfter}, {"dependency", in.Dependency}} {
		if err := only(f.name, f.v, redrive.RemoteFail); err != nil {
			return o, err
		}
	}
	if err := only("delay", in.Delay, redrive.RemoteSnooze); err != nil {
		return o, err
	}
	if len(in.Result) > 0 && o.Kind != redrive.RemoteComplete {
		return o, badRequest(prefix+"result", "result applies to outcome \"complete\" only")
	}
	switch o.Kind {
	case redrive.RemoteComplete:
		if len(in.Result) > 0 && !isNull(in.Result) {
			if err := store.CheckResult(in.Result); err != nil {
				return o, badRequest(prefix+"result", "%v", err)
			}
			o.Result = in.Result
		}
	case redrive.RemoteFail:
		if in.Class != "" {
			c, err := failure.ParseClass(in.Class)
			if err != nil {
				return o, badRequest(prefix+"class", "class must be unknown, transient, rate_limited, permanent or needs_auth, got %q", clip(in.Class))
			}
			o.Class = c
		}
		if in.Error == "" {
			return o, badRequest(prefix+"error", "a fail needs its error message")
		}
		for _, f := range []struct{ name, v string }{{"error", in.Error}, {"cause", in.Cause}} {
			if len(f.v) > maxWorkerError {
				return o, badRequest(prefix+f.name, "%s is %d bytes long, the limit is %d", f.name, len(f.v), maxWorkerError)
			}
		}
		o.Error, o.Cause = in.Error, in.Cause
		if err := checkName(prefix+"reason", in.Reason, maxName); err != nil {
			return o, err
		}
		if in.Dependency != "" {
			if err := redrive.CheckName("dependency", in.Dependency); err != nil {
				return o, badRequest(prefix+"dependency", "%v", err)
			}
		}
		o.Reason, o.Dependency = in.Reason, in.Dependency
		if in.RetryAfter != "" {
			d, err := time.ParseDuration(in.RetryAfter)
			if err != nil || d < 0 || d > maxDelay {
				return o, badRequest(prefix+"retry_after", "retry_after must be a non-negative duration such as \"2s\", got %q", clip(in.RetryAfter))
			}
			o.RetryAfter = d
		}
	case redrive.RemoteSnooze:
		if in.Delay == "" {
			return o, badRequest(prefix+"delay", "a snooze needs its delay, such as \"30s\"")
		}
		d, err := time.ParseDuration(in.Delay)
		if err != nil || d <= 0 || d > maxDelay {
			return o, badRequest(prefix+"delay", "delay must be a positive duration such as \"30s\", at most %s, got %q", maxDelay, clip(in.Delay))
		}
		o.Delay = d
	}
	if err := o.Check(); err != nil {
		return o, badRequest(prefix+"outcome", "%v", err)
	}
	return o, nil
}

// ParseOutcomes reads and checks a batch of outcomes: the first bad item
// is an error naming it, and none is applied.
func ParseOutcomes(in *OutcomesBody) ([]redrive.RemoteOutcome, error) {
	if err := checkWorker(in.Worker); err != nil {
		return nil, err
	}
	if len(in.Outcomes) == 0 || len(in.Outcomes) > redrive.MaxRemoteLease {
		return nil, badRequest("outcomes", "outcomes must hold 1 to %d outcomes, got %d", redrive.MaxRemoteLease, len(in.Outcomes))
	}
	outs := make([]redrive.RemoteOutcome, len(in.Outcomes))
	for i := range in.Outcomes {
		o, err := ParseOutcome(&in.Outcomes[i], fmt.Sprintf("outcomes[%d].", i))
		if err != nil {
			return nil, err
		}
		outs[i] = o
	}
	return outs, nil
}

// outcomeStatus answers one result.
func outcomeStatus(res redrive.RemoteResult) OutcomeStatus {
	st := OutcomeStatus{ID: res.ID, Lease: res.Lease, Status: http.StatusOK}
	switch {
	case res.Err == nil:
		st.State = res.State
		if !res.RunAt.IsZero() {
			t := res.RunAt
			st.RunAt = &t
		}
	case errors.Is(res.Err, redrive.ErrNotFound):
		st.Status = http.StatusNotFound
		st.Error = &errorDetail{Code: "not_found", Message: res.Err.Error()}
	default:
		st.Status = http.StatusConflict
		st.Error = &errorDetail{Code: "lease_lost", Message: res.Err.Error()}
	}
	return st
}

func (a *api) workerOutcomes(w http.ResponseWriter, r *http.Request) error {
	var in OutcomesBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	outs, err := ParseOutcomes(&in)
	if err != nil {
		return err
	}
	res, err := rw.Outcomes(r.Context(), in.Worker, outs)
	if err != nil {
		return err
	}
	out := OutcomesAnswer{Outcomes: make([]OutcomeStatus, len(res))}
	for i, x := range res {
		out.Outcomes[i] = outcomeStatus(x)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) workerOutcome(w http.ResponseWriter, r *http.Request) error {
	var in OneOutcomeBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := checkWorker(in.Worker); err != nil {
		return err
	}
	item := OutcomeItem{ID: id, Lease: in.Lease, Outcome: in.Outcome, Result: in.Result, Class: in.Class, Error: in.Error,
		Cause: in.Cause, Reason: in.Reason, RetryAfter: in.RetryAfter, Dependency: in.Dependency, Delay: in.Delay}
	o, err := ParseOutcome(&item, "")
	if err != nil {
		return err
	}
	res, err := rw.Outcomes(r.Context(), in.Worker, []redrive.RemoteOutcome{o})
	if err != nil {
		return err
	}
	st := outcomeStatus(res[0])
	if st.Error != nil {
		return &apiError{status: st.Status, code: st.Error.Code, msg: st.Error.Message}
	}
	writeJSON(w, st.Status, st)
	return nil
}

func (a *api) workerStop(w http.ResponseWriter, r *http.Request) error {
	var in StopBody
	rw, err := a.workerBody(w, r, &in)
	if err != nil {
		return err
	}
	if err := checkWorker(in.Worker); err != nil {
		return err
	}
	if err := rw.StopRemote(r.Context(), in.Worker); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, StopBody(in))
	return nil
}
