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
