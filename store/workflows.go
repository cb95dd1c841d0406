package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Blocked is the state of a workflow's job that waits for its
// dependencies (WorkflowNode.After), and of a workflow's callback job
// that waits for its event (NewWorkflow.OnSuccess and the others). A
// blocked job is never fetched and uses no attempt: the store makes it
// pending, in the transaction that completes its last dependency (or
// fires its callback), or cancels it. It is not in States.
const Blocked State = "blocked"

// OnDead says what a workflow does with the dependents of a job that
// died (or was canceled): see docs/design.md, "Workflows".
type OnDead string

// The failure policies of a workflow.
const (
	// WaitOnDead (the default): a dead job's dependents stay blocked
	// until it is redriven and completes; the workflow resumes there. A
	// canceled job's dependents, which would wait for ever, are
	// canceled.
	WaitOnDead OnDead = "wait"
	// CancelOnDead: a dead or canceled job's dependents, and theirs, are
	// canceled at once.
	CancelOnDead OnDead = "cancel"
	// RunOnDead: a dead or canceled job counts as done for its
	// dependents, which run anyway (and can read its state with
	// DependencyResults).
	RunOnDead OnDead = "run"
)

// Valid reports whether p is a known policy ("" is not: the default is
// filled in by CheckWorkflow).
func (p OnDead) Valid() bool { return p == WaitOnDead || p == CancelOnDead || p == RunOnDead }

// MaxResult bounds, in bytes, the result a completed job keeps
// (Outcome.Result).
const MaxResult = 64 << 10

// MaxWorkflowJobs bounds the jobs of one workflow (callbacks aside).
const MaxWorkflowJobs = 100_000

// MaxNodeName bounds, in bytes, a workflow job's name.
const MaxNodeName = 200

// MaxWorkflowKey bounds, in bytes, a workflow's own idempotency key
// (NewWorkflow.IdempotencyKey), as the REST API bounds every key.
const MaxWorkflowKey = 512

// NewWorkflow is a workflow (or a batch: a workflow whose jobs have no
// dependencies) to enqueue as a whole, atomically.
type NewWorkflow struct {
	// Name describes the workflow to people ("" is allowed): at most
	// MaxNodeName bytes of UTF-8, no control character.
	Name string
	// IdempotencyKey, when set, makes the enqueue happen once: a second
	// enqueue with the key returns the workflow holding it with Existing
	// set, and creates nothing. At most MaxWorkflowKey bytes of UTF-8,
	// no control character.
	IdempotencyKey string
	// OnDead is the failure policy ("" is WaitOnDead).
	OnDead OnDead
	// Jobs are the workflow's jobs. Their names are unique; After names
	// the jobs each depends on. A job may have an IdempotencyKey of its
	// own (each key once in the workflow): if a job holds it already (or
	// held it, its key kept), the whole enqueue is refused with a
	// *WorkflowConflictError naming the job and the holder (after the
	// workflow's own key is looked up: a workflow holding that one is
	// returned first).
	Jobs []WorkflowNode
	// OnSuccess, OnComplete and OnDeath are callback jobs, each enqueued
	// blocked with the workflow and made pending once: OnSuccess when
	// every job completed (after a redrive of a dead job, if need be),
	// OnComplete when every job finished for the first time (completed,
	// dead or canceled), OnDeath when a job died for the first time. A
	// callback not fired when the workflow is canceled is canceled.
	OnSuccess, OnComplete, OnDeath *NewJob
}

// WorkflowNode is one job of a NewWorkflow.
type WorkflowNode struct {
	// Name names the job within its workflow: 1 to MaxNodeName bytes of
	// UTF-8, no control character, no white space at either end.
	Name string
	Job  NewJob
	// After names the jobs of the workflow that must complete before
	// this one runs.
	After []string
}

// WorkflowState is where a workflow stands.
type WorkflowState string

// The workflow states.
const (
	// WorkflowActive: some job has not finished (or is dead with blocked
	// dependents, under WaitOnDead).
	WorkflowActive WorkflowState = "active"
	// WorkflowSucceeded: every job completed.
	WorkflowSucceeded WorkflowState = "succeeded"
	// WorkflowFinished: every job finished, some dead or canceled.
	WorkflowFinished WorkflowState = "finished"
	// WorkflowCanceled: the workflow was canceled (CancelWorkflow).
	WorkflowCanceled WorkflowState = "canceled"
)

// Workflow is a workflow as stored.
type Workflow struct {
	ID     int64         `json:"id"`
	Name   string        `json:"name,omitempty"`
	OnDead OnDead        `json:"on_dead"`
	State  WorkflowState `json:"state"`
	// IdempotencyKey is the key it was enqueued with.
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	CanceledAt     *time.Time `json:"canceled_at,omitempty"`
	// ClosedAt is when every job of the workflow had finished for the
	// first time (completed, dead or canceled: when its complete
	// callback fires, if it has one). From then on, as once canceled,
	// it takes no more jobs (AddToWorkflow), though a redrive of a dead
	// job may make it active again.
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// Counts are its jobs by state (callbacks aside; jobs deleted by
	// retention are not counted), and Total the number of its jobs.
	Counts map[State]int64 `json:"counts"`
	Total  int64           `json:"total"`
	// Completed, Dead and Canceled count its jobs in those states, kept
	// by the store as the jobs move (retention does not change them).
	Completed int64 `json:"completed"`
	Dead      int64 `json:"dead"`
	Canceled  int64 `json:"canceled"`
	// OnSuccess, OnComplete and OnDeath are the ids of its callback jobs
	// (0: none).
	OnSuccess  int64 `json:"on_success,omitempty"`
	OnComplete int64 `json:"on_complete,omitempty"`
	OnDeath    int64 `json:"on_death,omitempty"`
	// Jobs are its jobs, by id, with their dependencies (GetWorkflow and
	// EnqueueWorkflow fill it; ListWorkflows does not).
	Jobs []WorkflowJob `json:"jobs,omitempty"`
	// Existing is set by EnqueueWorkflow when the idempotency key was
	// taken and this is the workflow holding it. It is not stored.
	Existing bool `json:"existing,omitempty"`
}

// WorkflowJob is one job of a stored workflow.
type WorkflowJob struct {
	Name  string `json:"name"`
	JobID int64  `json:"job_id"`
	Kind  string `json:"kind"`
	State State  `json:"state"`
	// After are the ids of the jobs it depends on.
	After []int64 `json:"after"`
}

// DependencyResult is what a workflow's job reads of one of its
// dependencies.
type DependencyResult struct {
	Name  string `json:"name"`
	JobID int64  `json:"job_id"`
	State State  `json:"state"`
	// Result is what the dependency's handler recorded when it
	// completed (nil: none).
	Result json.RawMessage `json:"result,omitempty"`
	// ResultError says why Result is nil though the dependency recorded
	// one: "undecryptable: ..." for a result sealed (payload encryption
	// at rest) under a key the store does not have, DependencyDeleted
	// for a dependency deleted with its result.
	ResultError string `json:"result_error,omitempty"`
	// Deleted is set for a dependency deleted (by retention or a purge)
	// since its dependent was enqueued: Name, JobID and State are what
	// it was when deleted, and its result, if it had one, is gone
	// (ResultError says so).
	Deleted bool `json:"deleted,omitempty"`
}

// DependencyDeleted is the ResultError of a deleted dependency
// (DependencyResult.Deleted) that had recorded a result.
const DependencyDeleted = "deleted: the result went with its job (retention or a purge)"

// GoneDependency returns the DependencyResult of a dependency deleted
// while its dependent still had to run (both stores keep id, name,
// state and whether it had a result).
func GoneDependency(id int64, name string, state State, hadResult bool) DependencyResult {
	r := DependencyResult{Name: name, JobID: id, State: state, Deleted: true}
	if hadResult {
		r.ResultError = DependencyDeleted
	}
	return r
}

// Workflows is the part of a Store that keeps workflows and batches
// (docs/design.md, "Workflows"). The store moves a workflow's jobs out
// of Blocked, fires its callbacks and keeps its counts in the
// transaction of the state change that causes it, whichever call makes
// it (Finish, Cancel, Redrive, a rescue, an operation), so that a
// dependency's completion releases its dependents exactly once, in any
// process.
type Workflows interface {
	// EnqueueWorkflow checks w (CheckWorkflow: ErrInvalid naming the
	// cycle or the unknown names) and inserts it with its jobs and
	// callbacks atomically: the jobs without dependencies pending or
	// scheduled, the others and the callbacks Blocked. It returns the
	// workflow with its jobs.
	EnqueueWorkflow(ctx context.Context, w NewWorkflow, now time.Time) (*Workflow, error)

	// EnqueueWorkflows enqueues ws (CheckWorkflows) as EnqueueWorkflow
	// enqueues each, in one transaction: all of them or none. It returns
	// them in ws' order. A workflow whose key is held is answered by
	// the workflow holding it (Existing set), and so is one whose key an
	// earlier workflow of ws takes: by that one. Any error refusing one
	// workflow (its check, a key one of its jobs finds held) refuses
	// them all, as a *WorkflowBatchError naming it.
	EnqueueWorkflows(ctx context.Context, ws []NewWorkflow, now time.Time) ([]*Workflow, error)

	// GetWorkflow returns a workflow with its jobs, or ErrNotFound.
	GetWorkflow(ctx context.Context, id int64) (*Workflow, error)

	// ListWorkflows returns up to limit workflows with ids below before
	// (0: from the newest), newest first, without their jobs, and the
	// cursor of the next page (0: none).
	ListWorkflows(ctx context.Context, before int64, limit int) ([]*Workflow, int64, error)

	// CountWorkflows returns the number of workflows in each state
	// (WorkflowStates, each present: 0 when none), from the workflows'
	// rows alone (one read of them, none of their jobs').
	CountWorkflows(ctx context.Context) (map[WorkflowState]int64, error)

	// AddToWorkflow adds jobs to an open workflow (neither canceled nor
	// closed: Workflow.ClosedAt), atomically: all of them or none. A
	// job's name is unique in the workflow; its After names jobs of the
	// request or members of the workflow, never a job added later, so
	// that no cycle can pass through a member (CheckWorkflowAdd checks
	// the request's own). A job is blocked while an edge holds it back:
	// an edge from a job of the request, or from a member that has not
	// completed (under RunOnDead: that has not finished); the others
	// are due at once (or at their RunAt). The workflow's total grows by
	// the jobs added, so that its callbacks wait for them. It returns
	// the workflow with its jobs. An unknown id is ErrNotFound; a name
	// taken, a dependency naming no job (a member deleted by retention
	// included) or a cycle is a *WorkflowError (ErrInvalid); a canceled
	// or closed workflow, or a dependency on a member whose state would
	// cancel the job at once (canceled under WaitOnDead or
	// CancelOnDead, dead under CancelOnDead), is a
	// *WorkflowConflictError (ErrConflict). The add takes the
	// workflow's lock that the moves of its jobs take: an add racing
	// the completion of its last job lands before it (and the callbacks
	// wait for the jobs added) or is refused, the workflow closed.
	AddToWorkflow(ctx context.Context, id int64, jobs []WorkflowNode, now time.Time) (*Workflow, error)

	// CancelWorkflow cancels a workflow: its waiting (blocked, pending,
	// scheduled) jobs and its callbacks not fired are canceled, and the
	// cancellation of its running jobs is requested (as Cancel does).
	// Dead jobs stay in the DLQ. Canceling a canceled workflow changes
	// nothing; an unknown id is ErrNotFound.
	CancelWorkflow(ctx context.Context, id int64, now time.Time) (*Workflow, error)

	// DependencyResults returns, for a workflow's job, each of its
	// dependencies with its state and recorded result, by id; none for
	// a job outside a workflow. A dependency deleted (retention, a
	// purge) while the job still had to run is there, marked Deleted,
	// without its result. An unknown job is ErrNotFound.
	DependencyResults(ctx context.Context, jobID int64) ([]DependencyResult, error)
}

// WorkflowError is the ErrInvalid error CheckWorkflow returns for a
// workflow whose dependencies cannot be satisfied.
type WorkflowError struct {
	// Unknown are the dependencies naming no job: "job -> name", each
	// name as QuoteNode writes it.
	Unknown []string
	// UnknownJobs are the jobs, their names as given, whose dependency
	// names no job: one per Unknown, in its order.
	UnknownJobs []string
	// Cycle is one cycle of dependencies, its first job repeated last.
	Cycle []string
	// Problem is any other problem (a duplicate or bad name).
	Problem string
	// Taken is the name of a job of an AddToWorkflow that a member of
	// the workflow holds (Problem says so too).
	Taken string
}

func (e *WorkflowError) Error() string {
	var parts []string
	if e.Problem != "" {
		parts = append(parts, e.Problem)
	}
	if len(e.Unknown) > 0 {
		parts = append(parts, "unknown dependencies: "+strings.Join(e.Unknown, ", "))
	}
	if len(e.Cycle) > 0 {
		parts = append(parts, "dependency cycle: "+strings.Join(e.Cycle, " -> "))
	}
	return "invalid workflow: " + strings.Join(parts, "; ")
}

// Unwrap makes a WorkflowError match ErrInvalid.
func (e *WorkflowError) Unwrap() error { return ErrInvalid }

// WorkflowConflictError is the ErrConflict error of an AddToWorkflow
// that the workflow's state refuses.
type WorkflowConflictError struct {
	// Workflow is the workflow's id, State its state.
	Workflow int64
	State    WorkflowState
	// Closed says why the workflow takes no more jobs: "canceled" or
	// "closed" (every job finished once); "" when it is open and one
	// job of the request is at fault.
	Closed string
	// Job is the name of the job of the request at fault, Field its
	// field ("after" or "idempotency_key"), Member the member its after
	// names and MemberState that member's state.
	Job, Field, Member string
	MemberState        State
	// Key is the job's idempotency key (Field "idempotency_key") and
	// Holder the job that holds it (Gone when that job was deleted and
	// its key is kept). EnqueueWorkflow's conflicts set only these,
	// Job and Field.
	Key    string
	Holder int64
	Gone   bool
}

func (e *WorkflowConflictError) Error() string {
	if e.Closed != "" {
		return fmt.Sprintf("workflow %d is %s (state %s): it takes no more jobs", e.Workflow, e.Closed, e.State)
	}
	if e.Field == "idempotency_key" {
		gone := ""
		if e.Gone {
			gone = " (deleted since, its key kept)"
		}
		return fmt.Sprintf("job %q: idempotency key %q is held by job %d%s: nothing enqueued", e.Job, e.Key, e.Holder, gone)
	}
	return fmt.Sprintf("workflow %d: job %q depends on %q, which is %s: under on_dead its dependents are canceled at once",
		e.Workflow, e.Job, e.Member, e.MemberState)
}

// Unwrap makes a WorkflowConflictError match ErrConflict.
func (e *WorkflowConflictError) Unwrap() error { return ErrConflict }

// AddEdgeDone reports whether the edge from a member of a workflow in
// state st, under policy p, is done at once for a job added with it
// (AddToWorkflow), and whether the add must be refused because the
// member's state cancels its dependents.
func AddEdgeDone(p OnDead, st State) (done, refuse bool) {
	switch {
	case st == Completed:
		return true, false
	case (st == Dead || st == Canceled) && p == RunOnDead:
		return true, false
	case st == Canceled, st == Dead && p == CancelOnDead:
		return false, true
	}
	return false, false
}

// CheckWorkflow checks w's structure and fills its defaults (OnDead).
// It returns the order in which to insert the jobs (indexes of w.Jobs,
// dependencies before their dependents), or an error wrapping
// ErrInvalid: a *WorkflowError for a duplicate or bad name, a
// dependency naming no job, or a cycle. The jobs themselves are checked
// by the store as Enqueue checks them.
func CheckWorkflow(w *NewWorkflow) ([]int, error) {
	if w.OnDead == "" {
		w.OnDead = WaitOnDead
	}
	if !w.OnDead.Valid() {
		return nil, fmt.Errorf("%w: on_dead %q (want wait, cancel or run)", ErrInvalid, w.OnDead)
	}
	if len(w.Jobs) == 0 {
		return nil, &WorkflowError{Problem: "no jobs"}
	}
	if len(w.Jobs) > MaxWorkflowJobs {
		return nil, &WorkflowError{Problem: fmt.Sprintf("%d jobs (at most %d)", len(w.Jobs), MaxWorkflowJobs)}
	}
	if len(w.Name) > MaxNodeName || !utf8.ValidString(w.Name) {
		return nil, fmt.Errorf("%w: workflow name longer than %d bytes or not UTF-8", ErrInvalid, MaxNodeName)
	}
	if strings.ContainsFunc(w.Name, unicode.IsControl) {
		return nil, fmt.Errorf("%w: workflow name %q holds a control character", ErrInvalid, w.Name)
	}
	// The key is stored and indexed as it is: checked as the API checks
	// it, so that every store takes the same keys (PostgreSQL's text
	// takes no NUL nor invalid UTF-8).
	if k := w.IdempotencyKey; len(k) > MaxWorkflowKey || !utf8.ValidString(k) || strings.ContainsFunc(k, unicode.IsControl) {
		return nil, fmt.Errorf("%w: workflow idempotency key of %d bytes: at most %d bytes of UTF-8, no control character",
			ErrInvalid, len(k), MaxWorkflowKey)
	}
	return checkNodes(w.Jobs, nil, nil)
}

// CheckWorkflowAdd checks the jobs of an AddToWorkflow as CheckWorkflow
// checks a workflow's, their dependencies naming jobs of jobs or
// members (member reports whether a name is a member's, and which job
// it is): a name used twice or taken by a member, a dependency naming
// neither, or a cycle among jobs is a *WorkflowError. A nil member
// checks what can be checked without the workflow: every name is free
// and every dependency outside jobs a member. It returns the order in
// which to insert the jobs (indexes of jobs, dependencies before their
// dependents).
func CheckWorkflowAdd(jobs []WorkflowNode, member func(name string) (int64, bool)) ([]int, error) {
	if len(jobs) == 0 {
		return nil, &WorkflowError{Problem: "no jobs"}
	}
	if len(jobs) > MaxWorkflowJobs {
		return nil, &WorkflowError{Problem: fmt.Sprintf("%d jobs (at most %d)", len(jobs), MaxWorkflowJobs)}
	}
	if member == nil {
		member = func(string) (int64, bool) { return 0, false }
		return checkNodes(jobs, member, func(string) bool { return true })
	}
	return checkNodes(jobs, member, func(name string) bool { _, ok := member(name); return ok })
}

// checkNodes checks jobs' names and dependencies and returns their
// order, dependencies first. taken, when not nil, says which names the
// workflow's members took, and outside which names outside jobs may be
// depended on (nil: none).
func checkNodes(jobs []WorkflowNode, taken func(string) (int64, bool), outside func(string) bool) ([]int, error) {
	idx := make(map[string]int, len(jobs))
	keys := map[string]string{}
	for i := range jobs {
		n := &jobs[i]
		if n.Name == "" || len(n.Name) > MaxNodeName || !utf8.ValidString(n.Name) {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job %d: name %q is empty, longer than %d bytes or not UTF-8", i+1, n.Name, MaxNodeName)}
		}
		// As the API: a name is printed in listings and error messages.
		if strings.ContainsFunc(n.Name, unicode.IsControl) || strings.TrimSpace(n.Name) != n.Name {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job %d: name %q holds a control character or starts or ends with white space", i+1, n.Name)}
		}
		if _, dup := idx[n.Name]; dup {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job name %q used twice", n.Name)}
		}
		if taken != nil {
			if id, ok := taken(n.Name); ok {
				return nil, &WorkflowError{Problem: fmt.Sprintf("job name %q is taken by job %d of the workflow", n.Name, id), Taken: n.Name}
			}
		}
		if k := n.Job.IdempotencyKey; k != "" {
			if other, dup := keys[k]; dup {
				return nil, &WorkflowError{Problem: fmt.Sprintf("jobs %q and %q have the same idempotency key %q", other, n.Name, k)}
			}
			keys[k] = n.Name
		}
		idx[n.Name] = i
	}
	var unknown, unknownJobs []string
	for i := range jobs {
		seen := map[string]bool{}
		for _, d := range jobs[i].After {
			if _, ok := idx[d]; !ok {
				if outside == nil || !outside(d) {
					unknown = append(unknown, QuoteNode(jobs[i].Name)+" -> "+QuoteNode(d))
					unknownJobs = append(unknownJobs, jobs[i].Name)
				}
			}
			if seen[d] {
				return nil, &WorkflowError{Problem: fmt.Sprintf("job %q depends on %q twice", jobs[i].Name, d)}
			}
			seen[d] = true
		}
	}
	if len(unknown) > 0 {
		return nil, &WorkflowError{Unknown: unknown, UnknownJobs: unknownJobs}
	}
	// Depth-first topological sort of jobs (a member is outside it); a
	// grey node met again closes a cycle.
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(jobs))
	order := make([]int, 0, len(jobs))
	var path []int
	var cycle []string
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		path = append(path, i)
		for _, d := range jobs[i].After {
			j, ok := idx[d]
			if !ok {
				continue // a member
			}
			switch color[j] {
			case grey:
				k := slices.Index(path, j)
				for _, p := range path[k:] {
					cycle = append(cycle, jobs[p].Name)
				}
				cycle = append(cycle, jobs[j].Name)
				return false
			case white:
				if !visit(j) {
					return false
				}
			}
		}
		path = path[:len(path)-1]
		color[i] = black
		order = append(order, i)
		return true
	}
	for i := range jobs {
		if color[i] == white && !visit(i) {
			// The path goes from dependent to dependency: name the cycle
			// in the order the jobs run.
			slices.Reverse(cycle)
			return nil, &WorkflowError{Cycle: cycle}
		}
	}
	return order, nil
}

// QuoteNode returns name as messages write a workflow job's name: as it
// is when it could name a job (valid UTF-8, not empty, no control
// character, no white space at either end) and holds neither " -> "
// (which parts a dependency's two names) nor a leading double quote;
// otherwise quoted, as strconv.Quote quotes it. A dependency naming no
// job is checked by nothing else: whatever it holds reaches an error's
// text, a log line or a terminal only escaped.
func QuoteNode(name string) string {
	if name == "" || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) ||
		strings.TrimSpace(name) != name || strings.Contains(name, " -> ") || name[0] == '"' {
		return strconv.Quote(name)
	}
	return name
}

// CheckResult returns an ErrInvalid error when result cannot be kept as
// a completed job's result: not JSON, or longer than MaxResult bytes.
func CheckResult(result json.RawMessage) error {
	if result == nil {
		return nil
	}
	if len(result) > MaxResult {
		return fmt.Errorf("%w: result of %d bytes (at most %d)", ErrInvalid, len(result), MaxResult)
	}
	if !json.Valid(result) {
		return fmt.Errorf("%w: result is not valid JSON", ErrInvalid)
	}
	return nil
}

// WorkflowStateOf derives a workflow's state from whether it was
// canceled and the counts of its jobs' final states the store keeps
// (which retention, deleting finished jobs, does not change).
func WorkflowStateOf(canceledAt bool, total, completed, dead, canceled int64) WorkflowState {
	return WorkflowStateFrom(canceledAt, completed == total, completed+dead+canceled == total)
}

// WorkflowStateFrom is WorkflowStateOf from what it tests: whether the
// workflow was canceled, whether every job completed, and whether every
// job finished (completed, dead or canceled). CountWorkflows groups the
// workflows by these three.
func WorkflowStateFrom(canceledAt, allCompleted, allFinished bool) WorkflowState {
	switch {
	case canceledAt:
		return WorkflowCanceled
	case allCompleted:
		return WorkflowSucceeded
	case allFinished:
		// A dead job with blocked dependents leaves jobs unfinished: only
		// a workflow none of whose jobs waits is finished.
		return WorkflowFinished
	}
	return WorkflowActive
}

// WorkflowStates lists every workflow state.
var WorkflowStates = []WorkflowState{WorkflowActive, WorkflowSucceeded, WorkflowFinished, WorkflowCanceled}

// CountWorkflowsSQL is the statement of both stores' CountWorkflows:
// the workflows grouped by WorkflowStateFrom's three tests.
const CountWorkflowsSQL = `SELECT canceled_at IS NOT NULL, completed = total, completed + dead + canceled = total, count(*)
	FROM workflows GROUP BY 1, 2, 3`

// MaxWorkflowBatch bounds the workflows of one EnqueueWorkflows; their
// jobs together are bounded by MaxWorkflowJobs, as one workflow's.
const MaxWorkflowBatch = 10_000

// WorkflowBatchError is the error of an EnqueueWorkflows refused
// because of one of its workflows: Index is its index in the call, Name
// its name, Err why (a *WorkflowError, a *WorkflowConflictError, an
// error wrapping ErrInvalid). Nothing was enqueued.
type WorkflowBatchError struct {
	Index int
	Name  string
	Err   error
}

func (e *WorkflowBatchError) Error() string {
	return fmt.Sprintf("workflow %d (%q): %v", e.Index, e.Name, e.Err)
}

// Unwrap returns Err: a WorkflowBatchError matches what Err matches.
func (e *WorkflowBatchError) Unwrap() error { return e.Err }

// CheckWorkflows checks the workflows of an EnqueueWorkflows, each as
// CheckWorkflow does (filling its defaults in ws), and the call as a
// whole: at least one workflow, at most MaxWorkflowBatch, at most
// MaxWorkflowJobs jobs together, and no idempotency key of a job taken
// by a job of another workflow of the call. It returns each workflow's
// insertion order (CheckWorkflow's), and for each the index of the
// earlier workflow of ws with the same idempotency key (-1: none), which
// answers it. An error about one workflow is a *WorkflowBatchError.
func CheckWorkflows(ws []NewWorkflow) (orders [][]int, firstOf []int, err error) {
	if len(ws) == 0 {
		return nil, nil, fmt.Errorf("%w: no workflows", ErrInvalid)
	}
	if len(ws) > MaxWorkflowBatch {
		return nil, nil, fmt.Errorf("%w: %d workflows (at most %d a call)", ErrInvalid, len(ws), MaxWorkflowBatch)
	}
	orders, firstOf = make([][]int, len(ws)), make([]int, len(ws))
	total := 0
	byKey := map[string]int{}
	type holder struct{ flow, job int }
	jobKeys := map[string]holder{}
	for i := range ws {
		w := &ws[i]
		if orders[i], err = CheckWorkflow(w); err != nil {
			return nil, nil, &WorkflowBatchError{Index: i, Name: w.Name, Err: err}
		}
		if total += len(w.Jobs); total > MaxWorkflowJobs {
			return nil, nil, fmt.Errorf("%w: the workflows hold %d jobs or more together (at most %d a call)", ErrInvalid, total, MaxWorkflowJobs)
		}
		firstOf[i] = -1
		if k := w.IdempotencyKey; k != "" {
			if f, ok := byKey[k]; ok {
				// Answered by workflow f: its jobs are never inserted.
				firstOf[i] = f
				continue
			}
			byKey[k] = i
		}
		for j := range w.Jobs {
			k := w.Jobs[j].Job.IdempotencyKey
			if k == "" {
				continue
			}
			if h, ok := jobKeys[k]; ok && h.flow != i {
				return nil, nil, &WorkflowBatchError{Index: i, Name: w.Name, Err: &WorkflowError{
					Problem: fmt.Sprintf("job %q has the idempotency key %q of job %q of workflow %d of the call", w.Jobs[j].Name, k, ws[h.flow].Jobs[h.job].Name, h.flow)}}
			}
			jobKeys[k] = holder{i, j}
		}
	}
	return orders, firstOf, nil
}

// IsWorkflowError reports whether err is a *WorkflowError, and returns it.
func IsWorkflowError(err error) (*WorkflowError, bool) {
	var we *WorkflowError
	ok := errors.As(err, &we)
	return we, ok
}
