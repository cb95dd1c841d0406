package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive/store"
)

// Completions in bulk.
//
// A completion applied by its own statement cost about twice the update
// itself: database/sql's and the driver's work per statement (a dozen
// binds, the step, the reset, the count of changed rows). Plain
// completions (no history event, no progress: a handler that returned nil
// without calling Record) are the bulk of the work, so they go many to a
// statement: an UPDATE ... FROM a VALUES list of (id, lease, at,
// duration), fenced as the one-by-one statement is (running, same lease,
// same worker). The statement has a few fixed sizes (completeSizes), so
// that each is prepared once; a batch is cut into as many of the largest
// as fit, then smaller ones, and what remains goes one by one.
//
// Which outcomes applied: a statement that changed as many rows as it
// carries applied them all (the usual case). One that changed fewer held a
// stale outcome; it is rolled back to a savepoint taken before it, and its
// outcomes are applied one by one, which tells each.

// completeSizes are the row counts of the bulk completion statements, the
// largest first. Fewer completions than the smallest go one by one: below
// it the savepoint costs more than the statements it saves.
var completeSizes = []int{256, 64, 16}

// completeSQL is the bulk completion of n outcomes: 4 parameters per
// outcome (id, lease, at, duration), then the worker.
func completeSQL(n int) string {
	return `WITH o(id, lease, at, dur) AS (VALUES ` + strings.Repeat("(?, ?, ?, ?), ", n-1) + `(?, ?, ?, ?))
	UPDATE jobs SET state = 'completed', finished_at = o.at, last_duration = o.dur, lease_until = NULL, worker = NULL, cancel_requested = 0
	FROM o WHERE jobs.id = o.id AND jobs.state = 'running' AND jobs.lease = o.lease AND jobs.worker = ?`
}

func completeStmt(n int) string { return "complete" + strconv.Itoa(n) }

func init() {
	for _, n := range completeSizes {
		writeSQL[completeStmt(n)] = completeSQL(n)
	}
}

// completeChunk is the plain completions of one worker that go in one
// bulk statement.
type completeChunk struct {
	idx  []int // the outcomes' indexes
	args []any
}

// completions splits outcomes: the plain Complete outcomes (no event, no
// progress, not fenced on an expired lease) of jobs that have no other outcome in the call go in bulk
// statements, returned as chunks; the others (other kinds, and every
// outcome of a job that has several, which must apply in their order) are
// returned by index, to be applied one by one (those of one job in their
// order).
func completions(outcomes []store.Outcome) ([]completeChunk, []int) {
	var alone []int
	seen := make(map[int64]int, len(outcomes)) // job id -> outcomes of it
	for i := range outcomes {
		seen[outcomes[i].JobID]++
	}
	var workers []string
	byWorker := map[string][]int{}
	for i := range outcomes {
		o := &outcomes[i]
		if o.Kind != store.Complete || o.Event != nil || o.Progress != nil || o.Result != nil || !o.ExpiredBy.IsZero() || seen[o.JobID] > 1 {
			alone = append(alone, i)
			continue
		}
		if _, ok := byWorker[o.Worker]; !ok {
			workers = append(workers, o.Worker)
		}
		byWorker[o.Worker] = append(byWorker[o.Worker], i)
	}
	var chunks []completeChunk
	for _, w := range workers {
		idx := byWorker[w]
		for _, size := range completeSizes {
			for len(idx) >= size {
				c := completeChunk{idx: idx[:size:size], args: make([]any, 0, 4*size+1)}
				for _, i := range c.idx {
					o := &outcomes[i]
					c.args = append(c.args, o.JobID, o.Lease, micros(o.At), int64(o.Duration))
				}
				c.args = append(c.args, w)
				chunks = append(chunks, c)
				idx = idx[size:]
			}
		}
		alone = append(alone, idx...)
	}
	return chunks, alone
}

// completeAll applies chunk c in tx: it reports the outcomes it applied to
// applied, and returns those to apply one by one (all of them, when one
// was stale).
func (s *Store) completeAll(ctx context.Context, tx *sql.Conn, c completeChunk, applied func(i int)) (alone []int, err error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT complete_bulk"); err != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", err)
	}
	res, err := s.stmt(tx, completeStmt(len(c.idx))).ExecContext(ctx, c.args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", err)
	}
	if n != int64(len(c.idx)) {
		// A stale outcome: undo, and apply them one by one.
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO complete_bulk"); err != nil {
			return nil, fmt.Errorf("sqlite: finish: %w", err)
		}
		alone = c.idx
	} else {
		for _, i := range c.idx {
			applied(i)
		}
	}
	if _, err := tx.ExecContext(ctx, "RELEASE complete_bulk"); err != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", err)
	}
	return alone, nil
}

// A bulk completion's workflow work (migration 0039).
//
// jobs_flow ran nine statements for each completion of a workflow's job,
// most of a completion's cost when Finish completes hundreds. While
// flowBatchOn's row exists (in a Finish of two completions or more,
// from before its first statement to after its last), jobs_flow_batch
// records such a completion in flow_batch instead; flowBatchSQL then
// applies the
// recorded completions with one statement per table, in the order
// jobs_flow runs them, and empties the table. What it applies is what
// jobs_flow would have applied one completion after another: the counts
// add up, an edge done stays done, a dependent is released once none of
// its edges holds it back, and a callback fires once its workflow's
// counts say so. The times differ by the spread of the batch's
// completions: a workflow closes at its latest completion of the batch,
// a released dependent compares its run_at with its latest dependency's,
// and a callback runs from the batch's latest completion.
const (
	flowBatchOn  = `INSERT INTO flow_batch (job, flow, at) VALUES (0, 0, 0)`
	flowBatchOff = `DELETE FROM flow_batch WHERE job = 0 RETURNING EXISTS (SELECT 1 FROM flow_batch WHERE job <> 0)`
)

// flowBatchSQL are the statements that apply flow_batch's completions.
var flowBatchSQL = []string{
	// The workflows' counts, and their closing when every job finished.
	`UPDATE workflows SET completed = completed + b.n,
		closed_at = CASE WHEN closed_at IS NULL AND completed + b.n + dead + canceled = total THEN b.at ELSE closed_at END
	FROM (SELECT flow, count(*) AS n, max(at) AS at FROM flow_batch GROUP BY flow) AS b
	WHERE workflows.id = b.flow`,
	// The edges the completed jobs no longer hold back.
	`UPDATE job_deps SET done = 1 WHERE dep_id IN (SELECT job FROM flow_batch) AND done = 0`,
	// The blocked dependents none of whose edges holds back: pending, or
	// scheduled when they were enqueued for later.
	`UPDATE jobs SET state = CASE WHEN run_at > (SELECT max(b.at) FROM job_deps d JOIN flow_batch b ON b.job = d.dep_id WHERE d.job_id = jobs.id)
		THEN 'scheduled' ELSE 'pending' END
	WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id IN (SELECT job FROM flow_batch)) AND state = 'blocked'
		AND NOT EXISTS (SELECT 1 FROM job_deps d WHERE d.job_id = jobs.id AND d.done = 0)`,
	// The complete and success callbacks of the workflows whose counts
	// now say so: each a blocked job made pending once.
	`UPDATE jobs SET state = 'pending', run_at = max(run_at, (SELECT max(at) FROM flow_batch))
	WHERE id IN (SELECT w.on_complete FROM workflows w WHERE w.id IN (SELECT flow FROM flow_batch) AND w.completed + w.dead + w.canceled = w.total
		UNION ALL SELECT w.on_success FROM workflows w WHERE w.id IN (SELECT flow FROM flow_batch) AND w.completed = w.total)
		AND state = 'blocked'`,
	`DELETE FROM flow_batch`,
}

func flowBatchStmt(i int) string { return "flowBatch" + strconv.Itoa(i) }

func init() {
	writeSQL["flowBatchOn"] = flowBatchOn
	writeSQL["flowBatchOff"] = flowBatchOff
	for i, q := range flowBatchSQL {
		writeSQL[flowBatchStmt(i)] = q
	}
}

// completeChunks applies chunks in tx, reporting the outcomes applied to
// applied; it returns the outcomes to apply one by one.
func (s *Store) completeChunks(ctx context.Context, tx *sql.Conn, chunks []completeChunk, applied func(i int)) (alone []int, err error) {
	for _, c := range chunks {
		stale, err := s.completeAll(ctx, tx, c, applied)
		if err != nil {
			return nil, err
		}
		alone = append(alone, stale...)
	}
	return alone, nil
}

// flowBatchWorth reports whether Finish defers the workflow work of
// outcomes' completions to the end of its transaction (flowBatchEnd):
// when there are two or more (one gains nothing from it).
func flowBatchWorth(outcomes []store.Outcome) bool {
	n := 0
	for i := range outcomes {
		if outcomes[i].Kind == store.Complete {
			if n++; n == 2 {
				return true
			}
		}
	}
	return false
}

// flowBatchBegin makes the completions of workflow jobs that follow in
// tx recorded in flow_batch rather than applied by jobs_flow.
func (s *Store) flowBatchBegin(ctx context.Context, tx *sql.Conn) error {
	if _, err := s.stmt(tx, "flowBatchOn").ExecContext(ctx); err != nil {
		return fmt.Errorf("sqlite: finish: %w", err)
	}
	return nil
}

// flowBatchEnd ends what flowBatchBegin began, and applies the recorded
// completions (flowBatchSQL).
func (s *Store) flowBatchEnd(ctx context.Context, tx *sql.Conn) error {
	var recorded bool
	if err := s.stmt(tx, "flowBatchOff").QueryRowContext(ctx).Scan(&recorded); err != nil {
		return fmt.Errorf("sqlite: finish: %w", err)
	}
	if !recorded {
		return nil
	}
	for i := range flowBatchSQL {
		if _, err := s.stmt(tx, flowBatchStmt(i)).ExecContext(ctx); err != nil {
			return fmt.Errorf("sqlite: finish: workflows: %w", err)
		}
	}
	return nil
}
