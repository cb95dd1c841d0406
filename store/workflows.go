package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
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

// NewWorkflow is a workflow (or a batch: a workflow whose jobs have no
// dependencies) to enqueue as a whole, atomically.
type NewWorkflow struct {
	// Name describes the workflow to people ("" is allowed).
	Name string
	// IdempotencyKey, when set, makes the enqueue happen once: a second
	// enqueue with the key returns the workflow holding it with Existing
	// set, and creates nothing.
	IdempotencyKey string
	// OnDead is the failure policy ("" is WaitOnDead).
	OnDead OnDead
	// Jobs are the workflow's jobs. Their names are unique; After names
	// the jobs each depends on. A job's own IdempotencyKey must be empty:
	// the workflow's key makes the whole enqueue idempotent.
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
	// UTF-8.
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
	// at rest) under a key the store does not have.
	ResultError string `json:"result_error,omitempty"`
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

	// CancelWorkflow cancels a workflow: its waiting (blocked, pending,
	// scheduled) jobs and its callbacks not fired are canceled, and the
	// cancellation of its running jobs is requested (as Cancel does).
	// Dead jobs stay in the DLQ. Canceling a canceled workflow changes
	// nothing; an unknown id is ErrNotFound.
	CancelWorkflow(ctx context.Context, id int64, now time.Time) (*Workflow, error)

	// DependencyResults returns, for a workflow's job, each of its
	// dependencies with its state and recorded result, by id; none for
	// a job outside a workflow. An unknown job is ErrNotFound.
	DependencyResults(ctx context.Context, jobID int64) ([]DependencyResult, error)
}

// WorkflowError is the ErrInvalid error CheckWorkflow returns for a
// workflow whose dependencies cannot be satisfied.
type WorkflowError struct {
	// Unknown are the dependencies naming no job: "job -> name".
	Unknown []string
	// Cycle is one cycle of dependencies, its first job repeated last.
	Cycle []string
	// Problem is any other problem (a duplicate or bad name).
	Problem string
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
	idx := make(map[string]int, len(w.Jobs))
	for i := range w.Jobs {
		n := &w.Jobs[i]
		if n.Name == "" || len(n.Name) > MaxNodeName || !utf8.ValidString(n.Name) || strings.ContainsRune(n.Name, 0) {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job %d: name %q is empty, longer than %d bytes or not UTF-8", i+1, n.Name, MaxNodeName)}
		}
		if _, dup := idx[n.Name]; dup {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job name %q used twice", n.Name)}
		}
		if n.Job.IdempotencyKey != "" {
			return nil, &WorkflowError{Problem: fmt.Sprintf("job %q has an idempotency key (give the workflow one)", n.Name)}
		}
		idx[n.Name] = i
	}
	var unknown []string
	for i := range w.Jobs {
		seen := map[string]bool{}
		for _, d := range w.Jobs[i].After {
			if _, ok := idx[d]; !ok {
				unknown = append(unknown, w.Jobs[i].Name+" -> "+d)
			}
			if seen[d] {
				return nil, &WorkflowError{Problem: fmt.Sprintf("job %q depends on %q twice", w.Jobs[i].Name, d)}
			}
			seen[d] = true
		}
	}
	if len(unknown) > 0 {
		return nil, &WorkflowError{Unknown: unknown}
	}
	// Depth-first topological sort; a grey node met again closes a cycle.
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(w.Jobs))
	order := make([]int, 0, len(w.Jobs))
	var path []int
	var cycle []string
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		path = append(path, i)
		for _, d := range w.Jobs[i].After {
			j := idx[d]
			switch color[j] {
			case grey:
				k := slices.Index(path, j)
				for _, p := range path[k:] {
					cycle = append(cycle, w.Jobs[p].Name)
				}
				cycle = append(cycle, w.Jobs[j].Name)
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
	for i := range w.Jobs {
		if color[i] == white && !visit(i) {
			// The path goes from dependent to dependency: name the cycle
			// in the order the jobs run.
			slices.Reverse(cycle)
			return nil, &WorkflowError{Cycle: cycle}
		}
	}
	return order, nil
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

// IsWorkflowError reports whether err is a *WorkflowError, and returns it.
func IsWorkflowError(err error) (*WorkflowError, bool) {
	var we *WorkflowError
	ok := errors.As(err, &we)
	return we, ok
}
