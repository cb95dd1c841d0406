package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Operations is the part of a Store that keeps durable bulk operations:
// replays, bulk redrives, purges, folder exports and cancellations. An operation is a
// row that a runner claims with a lease fenced by its worker id, as a job
// is; it works through its jobs in ascending id order, batch by batch,
// and each batch's effect commits in the same transaction as the advance
// of the operation's cursor (StepOperation), so that a runner that dies
// leaves the operation exactly where its last batch committed: the next
// runner continues from there and never handles a job twice.
type Operations interface {
	// CreateOperation stores a new pending operation and returns it. The
	// store records the largest job id at that moment (Operation.MaxID):
	// the operation works on the jobs that existed when it was created,
	// never on jobs created since (the jobs a replay creates, among
	// others). An ID already taken is ErrConflict; a malformed operation
	// (unknown kind, empty id) is ErrInvalid.
	CreateOperation(ctx context.Context, op NewOperation, now time.Time) (*Operation, error)

	// GetOperation returns one operation, or ErrNotFound.
	GetOperation(ctx context.Context, id string) (*Operation, error)

	// ListOperations returns operations newest first (created_at, then
	// id, descending), at most limit (1..MaxPageSize, 0: DefaultPageSize),
	// those created before the operation named by before when it is not
	// "" (keyset pagination). next is the before of the following page,
	// "" on the last.
	ListOperations(ctx context.Context, before string, limit int) (ops []*Operation, next string, err error)

	// ClaimOperation leases one runnable operation to worker until
	// leaseUntil, and returns it (nil, nil when there is none): a pending
	// operation, or a running one whose lease ended before now (its
	// runner died), oldest first; when id is not "", only that
	// operation. It becomes running, held by worker; StartedAt is set
	// the first time. Two concurrent claims never get the same operation.
	ClaimOperation(ctx context.Context, id, worker string, now, leaseUntil time.Time) (*Operation, error)

	// RenewOperation extends the lease of a running operation held by
	// worker to r.LeaseUntil (and records Matched when r.Matched is
	// not negative), and returns the operation. An operation that is no
	// longer running for worker (paused, canceled, or claimed by another
	// runner after its lease ended) is ErrConflict, and nothing changes:
	// its runner must stop.
	RenewOperation(ctx context.Context, r OperationRenewal) (*Operation, error)

	// StepOperation handles the next batch of a running operation held
	// by s.Worker whose cursor is s.Cursor, and advances its cursor past
	// the batch, in ONE transaction: either both happen or neither. A
	// stale step (another worker holds the operation, its cursor moved,
	// or it is no longer running) is ErrConflict and changes nothing.
	// For replay, redrive and purge the store selects the batch itself:
	// up to s.Limit jobs matching the operation's filter with
	// s.Cursor < id <= MaxID, in id order. For export, the runner wrote
	// the jobs it read with OperationJobs and passes, in s.Exported, how
	// many and the id of the last one.
	StepOperation(ctx context.Context, s OperationStep) (StepResult, error)

	// OperationJobs reads, in ascending id order, up to limit jobs
	// (with their history) matching the operation's filter with
	// after < id <= MaxID: what an export writes next.
	OperationJobs(ctx context.Context, id string, after int64, limit int) ([]*Job, error)

	// FinishOperation ends a running operation held by worker: done, or
	// failed with msg. Not running for worker is ErrConflict.
	FinishOperation(ctx context.Context, id, worker string, state OperationState, msg string, now time.Time) (*Operation, error)

	// SetOperationState pauses, resumes or cancels an operation on a
	// user's request and returns it. Pause: a pending or running
	// operation becomes paused (its runner stops at its next step or
	// renewal). Resume: a paused operation becomes pending (a runner
	// claims it and continues at its cursor). Cancel: a pending, running
	// or paused operation becomes canceled, for good. Any other
	// transition is ErrConflict; an unknown id ErrNotFound. Asking for
	// the state the operation is already in changes nothing and is not
	// an error.
	SetOperationState(ctx context.Context, id string, to OperationState, now time.Time) (*Operation, error)

	// DeleteOperations deletes the finished operations (done, failed,
	// canceled) that finished before the cutoff (retention) and returns
	// how many.
	DeleteOperations(ctx context.Context, before time.Time) (int64, error)
}

// OperationKind says what an operation does.
type OperationKind string

// The kinds of operations.
const (
	// OpReplay enqueues, as new jobs, copies of the jobs matching a
	// filter, whatever their state: each new job names its source
	// (Job.ReplayOf).
	OpReplay OperationKind = "replay"
	// OpRedrive moves the dead jobs matching a filter back to pending.
	OpRedrive OperationKind = "redrive"
	// OpPurge deletes the dead jobs matching a filter.
	OpPurge OperationKind = "purge"
	// OpExport writes the dead jobs matching a filter to a folder, one
	// directory per job.
	OpExport OperationKind = "export"
	// OpCancel cancels the pending and scheduled jobs matching a filter
	// (or given by id). Running jobs are never selected: a filter's
	// States may name pending and scheduled only, and the ids of a
	// cancel by ids that are not pending or scheduled are counted as
	// skipped (a running job is canceled one by one, Store.Cancel).
	OpCancel OperationKind = "cancel"
	// OpRekey re-seals, under the store's current payload key, every
	// stored payload sealed under another key (key rotation, see
	// PayloadRekeyer), whatever the job's state. It takes no filter.
	OpRekey OperationKind = "rekey"
)

// Valid reports whether k is a known kind.
func (k OperationKind) Valid() bool {
	switch k {
	case OpReplay, OpRedrive, OpPurge, OpExport, OpCancel, OpRekey:
		return true
	}
	return false
}

// OperationState is where an operation stands.
type OperationState string

// The states of an operation. Done, failed and canceled are final.
const (
	// OpPending: created or resumed, waiting for a runner.
	OpPending OperationState = "pending"
	// OpRunning: a runner holds its lease and works through its jobs.
	OpRunning OperationState = "running"
	// OpPaused: paused by a user; it keeps its cursor until resumed.
	OpPaused OperationState = "paused"
	// OpDone: every selected job was handled.
	OpDone OperationState = "done"
	// OpFailed: the runner met an error it cannot get past.
	OpFailed OperationState = "failed"
	// OpCanceled: canceled by a user; what it did stays done.
	OpCanceled OperationState = "canceled"
)

// Final reports whether s is a state an operation never leaves.
func (s OperationState) Final() bool {
	return s == OpDone || s == OpFailed || s == OpCanceled
}

// Valid reports whether s is a known state.
func (s OperationState) Valid() bool {
	switch s {
	case OpPending, OpRunning, OpPaused, OpDone, OpFailed, OpCanceled:
		return true
	}
	return false
}

// OperationParams are an operation's parameters, kept as given.
type OperationParams struct {
	// Filter selects the jobs. Replay honors every field (its States may
	// include completed); redrive, purge and export select dead jobs
	// only, whatever States says; cancel selects pending and scheduled
	// jobs, or those of States (a subset of them).
	Filter Filter `json:"filter"`
	// Batch is how many jobs one step handles (1..MaxPageSize).
	Batch int `json:"batch"`
	// Rate bounds how many jobs per second the operation handles (0:
	// no bound).
	Rate float64 `json:"rate"`
	// Note is recorded in the history of each job the operation touches
	// (redriven or replay events).
	Note string `json:"note,omitempty"`
	// Payload, for a redrive, replaces each redriven job's payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Keys, with Payload, are the limit groups and fair keys the new
	// payload names (RedriveParams.Keys).
	Keys RedriveKeys
	// Dir, for an export, is the folder the jobs are written to, on the
	// machine of the runner.
	Dir string `json:"dir,omitempty"`
	// Root, for an export, when set, is the folder Dir lies under, which
	// the runner writes through an os.Root opened on it, so that no
	// symbolic link leads a write out of it.
	Root string `json:"root,omitempty"`
	// Decrypt, for an export, writes payloads in plaintext instead of
	// sealed (see redrive.Client.Exported).
	Decrypt bool `json:"decrypt,omitempty"`
}

// OperationProgress counts what an operation did.
type OperationProgress struct {
	// Matched is how many jobs the selection held when the runner first
	// counted it (-1 until then).
	Matched int64 `json:"matched"`
	// Processed is the sum of the outcomes below.
	Processed int64 `json:"processed"`
	// Replayed counts the new jobs a replay enqueued.
	Replayed int64 `json:"replayed"`
	// Redriven counts the dead jobs a redrive moved back to pending.
	Redriven int64 `json:"redriven"`
	// Refused counts dead jobs marked not reprocessable (a redrive).
	Refused int64 `json:"refused"`
	// Skipped counts jobs that were gone or no longer dead (a redrive by
	// ids), or gone or no longer pending or scheduled (a cancel by ids).
	Skipped int64 `json:"skipped"`
	// Unblocks counts, for a redrive, the blocked jobs of workflows
	// waiting directly for the jobs it redrove (RedriveResult.Unblocks),
	// summed over its steps (a job waiting for two of them in different
	// steps counts twice).
	Unblocks int64 `json:"unblocks,omitempty"`
	// Purged counts the dead jobs a purge deleted.
	Purged int64 `json:"purged"`
	// Exported counts the dead jobs an export wrote.
	Exported int64 `json:"exported"`
	// Canceled counts the pending and scheduled jobs a cancel canceled.
	Canceled int64 `json:"canceled"`
	// Rekeyed counts the payloads a rekey re-sealed under the current
	// key.
	Rekeyed int64 `json:"rekeyed"`
	// Failed counts jobs an operation could not handle (a rekey: the
	// payloads that do not open, left as they are).
	Failed int64 `json:"failed"`
	// RefusedIDs are the ids of the refused jobs (the first
	// MaxRefusedIDs).
	RefusedIDs []int64 `json:"refused_ids"`
}

// MaxRefusedIDs bounds the refused ids an operation keeps.
const MaxRefusedIDs = 1000

// Tally sets Processed to the sum of the outcomes.
func (p *OperationProgress) Tally() {
	p.Processed = p.Replayed + p.Redriven + p.Refused + p.Skipped + p.Purged + p.Exported + p.Canceled + p.Rekeyed + p.Failed
}

// add adds the counts of d to p.
func (p *OperationProgress) add(d OperationProgress) {
	p.Replayed += d.Replayed
	p.Redriven += d.Redriven
	p.Refused += d.Refused
	p.Skipped += d.Skipped
	p.Purged += d.Purged
	p.Unblocks += d.Unblocks
	p.Exported += d.Exported
	p.Canceled += d.Canceled
	p.Rekeyed += d.Rekeyed
	p.Failed += d.Failed
	p.Tally()
	if room := MaxRefusedIDs - len(p.RefusedIDs); room > 0 && len(d.RefusedIDs) > 0 {
		p.RefusedIDs = append(p.RefusedIDs, d.RefusedIDs[:min(room, len(d.RefusedIDs))]...)
	}
}

// Operation is a durable bulk operation as stored.
type Operation struct {
	ID     string          `json:"id"`
	Kind   OperationKind   `json:"kind"`
	State  OperationState  `json:"state"`
	Params OperationParams `json:"params"`
	// Progress is what it did so far.
	Progress OperationProgress `json:"progress"`
	// Cursor is the id of the last job handled (0 before the first
	// batch): the operation continues with the jobs after it.
	Cursor int64 `json:"cursor"`
	// MaxID is the largest job id when the operation was created: it
	// handles no job created since.
	MaxID int64 `json:"max_id"`
	// Worker and LeaseUntil name the runner holding a running operation.
	Worker     string     `json:"worker,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Error says why it failed ("" otherwise).
	Error      string     `json:"error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// NewOperation is an operation to create.
type NewOperation struct {
	// ID names the operation: "op_" and 24 hexadecimal digits
	// (NewOperationID makes one).
	ID     string
	Kind   OperationKind
	Params OperationParams
}

// OperationRenewal extends a runner's lease on an operation.
type OperationRenewal struct {
	ID         string
	Worker     string
	LeaseUntil time.Time
	Now        time.Time
	// Matched, when not negative, is recorded as Progress.Matched.
	Matched int64
}

// OperationStep is one batch of a running operation.
type OperationStep struct {
	ID     string
	Worker string
	// Cursor fences the step: it applies only while the operation's
	// cursor is this.
	Cursor int64
	// Limit is the batch's size (at most MaxPageSize).
	Limit      int
	Now        time.Time
	LeaseUntil time.Time
	// Exported, for an export, is what the runner wrote.
	Exported *ExportedBatch
}

// ExportedBatch is what an export's runner wrote in one step.
type ExportedBatch struct {
	// Count is how many jobs it wrote; Last the id of the last one (the
	// new cursor).
	Count int64
	Last  int64
}

// StepResult is what one step did.
type StepResult struct {
	// Operation is the operation after the step.
	Operation *Operation
	// Handled counts what this batch did.
	Handled OperationProgress
	// Queues are the queues whose jobs became due (replay, redrive).
	Queues []string
	// End is set when the selection is exhausted: no job was left after
	// the cursor.
	End bool
}

// operationIDRE is the form of an operation's id.
var operationIDRE = regexp.MustCompile(`^op_[0-9a-f]{24}$`)

// ValidOperationID reports whether id has the form of an operation's id.
func ValidOperationID(id string) bool { return operationIDRE.MatchString(id) }

// CheckNewOperation reports, as an ErrInvalid error, what no store can
// keep: a malformed id, an unknown kind, a batch out of 1..MaxPageSize, a
// negative rate, a payload that is not JSON, an export without a folder.
// Stores call it from CreateOperation.
func CheckNewOperation(op *NewOperation) error {
	switch {
	case !ValidOperationID(op.ID):
		return fmt.Errorf("%w: operation id %q: want op_ and 24 hexadecimal digits", ErrInvalid, op.ID)
	case !op.Kind.Valid():
		return fmt.Errorf("%w: unknown operation kind %q", ErrInvalid, op.Kind)
	case op.Params.Batch < 1 || op.Params.Batch > MaxPageSize:
		return fmt.Errorf("%w: batch %d out of 1..%d", ErrInvalid, op.Params.Batch, MaxPageSize)
	case op.Params.Rate < 0:
		return fmt.Errorf("%w: rate must not be negative", ErrInvalid)
	case len(op.Params.Payload) > 0 && (op.Kind != OpRedrive || !json.Valid(op.Params.Payload)):
		return fmt.Errorf("%w: payload: only a redrive replaces payloads, with valid JSON", ErrInvalid)
	case op.Kind == OpExport && op.Params.Dir == "":
		return fmt.Errorf("%w: an export needs a folder", ErrInvalid)
	case op.Kind == OpRekey && !reflect.ValueOf(op.Params.Filter).IsZero():
		return fmt.Errorf("%w: a rekey takes no filter: it re-seals every payload under an old key", ErrInvalid)
	}
	if err := CheckRedriveKeys(op.Params.Keys); err != nil {
		return err
	}
	for _, st := range op.Params.Filter.States {
		if !st.Valid() {
			return fmt.Errorf("%w: unknown state %q", ErrInvalid, st)
		}
		if op.Kind == OpCancel && st != Pending && st != Scheduled {
			return fmt.Errorf("%w: a cancel selects pending and scheduled jobs only, not %s ones", ErrInvalid, st)
		}
	}
	return CheckPayloadMatch(op.Params.Filter)
}

// OperationFilter is the filter a step of op applies: a replay's as
// given, a cancel's restricted to pending and scheduled jobs (or those
// of its States), the others' restricted to dead jobs.
func OperationFilter(op *Operation) Filter {
	f := op.Params.Filter
	switch op.Kind {
	case OpReplay, OpRekey:
	case OpCancel:
		if len(f.States) == 0 {
			f.States = []State{Pending, Scheduled}
		}
	default:
		f.States = []State{Dead}
	}
	return f
}

// ByIDs reports whether a step of op takes the ids of its filter one by
// one (a redrive or a cancel by ids), the ids that are not in a state it
// handles counted as skipped, rather than selecting matching jobs.
func ByIDs(op *Operation) bool {
	return len(op.Params.Filter.IDs) > 0 && (op.Kind == OpRedrive || op.Kind == OpCancel)
}

// NextIDs returns, for a filter selecting ids, the ids of the next step:
// at most limit of them, after cursor, up to maxID, in ascending order
// (duplicates removed). A redrive or cancel by ids takes every id given
// (maxID math.MaxInt64): those that are not dead jobs (not pending or
// scheduled jobs) are counted as skipped.
func NextIDs(ids []int64, cursor, maxID int64, limit int) []int64 {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	out := []int64{}
	for _, id := range s {
		if id > cursor && id <= maxID {
			out = append(out, id)
			if len(out) == limit {
				break
			}
		}
	}
	return out
}

// ApplyStep records, on the operation read at the start of a step's
// transaction, what the step did: its counts, the new cursor, the lease
// and the time. Stores call it and write the result back.
func ApplyStep(op *Operation, s OperationStep, handled OperationProgress, cursor int64) {
	op.Progress.add(handled)
	op.Cursor = cursor
	lu := s.LeaseUntil.UTC()
	op.LeaseUntil = &lu
	op.UpdatedAt = s.Now.UTC()
}

// CheckStep reports, as an ErrConflict error, a step that does not apply
// to the operation as stored: not running, held by another worker, or at
// another cursor.
func CheckStep(op *Operation, worker string, cursor int64) error {
	switch {
	case op.State != OpRunning:
		return fmt.Errorf("operation %s is %s: %w", op.ID, op.State, ErrConflict)
	case op.Worker != worker:
		return fmt.Errorf("operation %s is held by another runner: %w", op.ID, ErrConflict)
	case op.Cursor != cursor:
		return fmt.Errorf("operation %s is at cursor %d, not %d: %w", op.ID, op.Cursor, cursor, ErrConflict)
	}
	return nil
}

// Transition returns the state an operation in state from goes to when
// a user asks for to (pause, resume: OpPending, cancel), and whether it
// changes; ErrConflict when the transition is not allowed.
func Transition(id string, from, to OperationState) (OperationState, bool, error) {
	switch to {
	case OpPaused:
		switch from {
		case OpPaused:
			return from, false, nil
		case OpPending, OpRunning:
			return OpPaused, true, nil
		}
	case OpPending:
		switch from {
		case OpPending, OpRunning:
			return from, false, nil
		case OpPaused:
			return OpPending, true, nil
		}
	case OpCanceled:
		switch from {
		case OpCanceled:
			return from, false, nil
		case OpPending, OpRunning, OpPaused:
			return OpCanceled, true, nil
		}
	default:
		return "", false, fmt.Errorf("%w: an operation cannot be set to %q", ErrInvalid, to)
	}
	return "", false, fmt.Errorf("operation %s is %s: %w", id, from, ErrConflict)
}

// payloadFieldRE is one key of a payload field's path.
var payloadFieldRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// PayloadPath splits a payload field's dotted path ("customer.id") into
// its keys, checking each.
func PayloadPath(field string) ([]string, error) {
	keys := strings.Split(field, ".")
	if len(keys) > 8 {
		return nil, fmt.Errorf("%w: payload field %q: at most 8 keys", ErrInvalid, field)
	}
	for _, k := range keys {
		if !payloadFieldRE.MatchString(k) {
			return nil, fmt.Errorf("%w: payload field %q: each key is a letter or _ then letters, digits, _ or - (at most 64)", ErrInvalid, field)
		}
	}
	return keys, nil
}

// CheckPayloadMatch reports a malformed payload match of f
// (Filter.PayloadField and PayloadValue) as an ErrInvalid error.
func CheckPayloadMatch(f Filter) error {
	if f.PayloadField == "" {
		if len(f.PayloadValue) > 0 {
			return fmt.Errorf("%w: a payload value needs a payload field", ErrInvalid)
		}
		return nil
	}
	if _, err := PayloadPath(f.PayloadField); err != nil {
		return err
	}
	if !json.Valid(f.PayloadValue) {
		return fmt.Errorf("%w: payload value of %s is not JSON", ErrInvalid, f.PayloadField)
	}
	var v any
	if err := json.Unmarshal(f.PayloadValue, &v); err != nil {
		return fmt.Errorf("%w: payload value of %s: %v", ErrInvalid, f.PayloadField, err)
	}
	switch v.(type) {
	case string, float64, bool, nil:
		return nil
	}
	return fmt.Errorf("%w: payload value of %s must be a string, number, boolean or null", ErrInvalid, f.PayloadField)
}

// ReplayEvent is the first event of a replay job's history: it names the
// job it replays.
func ReplayEvent(source int64, at time.Time, note string) Event {
	return Event{Kind: EventReplayed, At: at, ReplayOf: source, Note: note}
}

// ErrOperationErrorPrefix is the error of an operation whose filter has an
// ErrorPrefix: operations select by error text with ErrorContains only, so
// that every binary of a fleet runs them on the same jobs.
var ErrOperationErrorPrefix = fmt.Errorf("%w: an operation's filter cannot have an error prefix (select by error text, q, instead)", ErrInvalid)

// filterJSON is how an operation keeps its filter (and the API shows it).
type filterJSON struct {
	States        []State         `json:"states,omitempty"`
	Queue         string          `json:"queue,omitempty"`
	Kind          string          `json:"kind,omitempty"`
	Class         string          `json:"class,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Fingerprint   string          `json:"fingerprint,omitempty"`
	Since         *time.Time      `json:"since,omitempty"`
	Until         *time.Time      `json:"until,omitempty"`
	ErrorContains string          `json:"error_contains,omitempty"`
	IDs           []int64         `json:"ids,omitempty"`
	PayloadField  string          `json:"payload_field,omitempty"`
	PayloadValue  json.RawMessage `json:"payload_value,omitempty"`
}

// operationParamsJSON is OperationParams with its filter as filterJSON.
type operationParamsJSON struct {
	Filter  filterJSON      `json:"filter"`
	Batch   int             `json:"batch"`
	Rate    float64         `json:"rate"`
	Note    string          `json:"note,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Keys    RedriveKeys     `json:"keys,omitzero"`
	Dir     string          `json:"dir,omitempty"`
	Root    string          `json:"root,omitempty"`
	Decrypt bool            `json:"decrypt,omitempty"`
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// MarshalJSON encodes the parameters with the filter's fields in
// snake_case, leaving out those that are empty.
func (p OperationParams) MarshalJSON() ([]byte, error) {
	f := p.Filter
	if f.ErrorPrefix != "" {
		// A binary that predates the field would run the operation
		// on every job the rest of the filter selects.
		return nil, ErrOperationErrorPrefix
	}
	return json.Marshal(operationParamsJSON{
		Filter: filterJSON{States: f.States, Queue: f.Queue, Kind: f.Kind, Class: f.Class, Reason: f.Reason,
			Fingerprint: f.Fingerprint, Since: optionalTime(f.Since), Until: optionalTime(f.Until),
			ErrorContains: f.ErrorContains, IDs: f.IDs, PayloadField: f.PayloadField, PayloadValue: f.PayloadValue},
		Batch: p.Batch, Rate: p.Rate, Note: p.Note, Payload: p.Payload, Keys: p.Keys, Dir: p.Dir, Root: p.Root,
		Decrypt: p.Decrypt,
	})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (p *OperationParams) UnmarshalJSON(b []byte) error {
	var v operationParamsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	f := v.Filter
	*p = OperationParams{
		Filter: Filter{States: f.States, Queue: f.Queue, Kind: f.Kind, Class: f.Class, Reason: f.Reason,
			Fingerprint: f.Fingerprint, ErrorContains: f.ErrorContains, IDs: f.IDs, PayloadField: f.PayloadField,
			PayloadValue: f.PayloadValue},
		Batch: v.Batch, Rate: v.Rate, Note: v.Note, Payload: v.Payload, Keys: v.Keys, Dir: v.Dir, Root: v.Root,
		Decrypt: v.Decrypt,
	}
	if f.Since != nil {
		p.Filter.Since = f.Since.UTC()
	}
	if f.Until != nil {
		p.Filter.Until = f.Until.UTC()
	}
	return nil
}

// PayloadScalar decodes a payload match's value (checked by
// CheckPayloadMatch): a string, an int64 (an integer that fits), a
// float64 (another number), a bool, or nil for null.
func PayloadScalar(v json.RawMessage) any {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var x any
	_ = d.Decode(&x)
	if n, ok := x.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i
		}
		f, _ := n.Float64()
		return f
	}
	return x
}
