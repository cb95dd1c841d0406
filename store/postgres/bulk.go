package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// Bulk enqueue with COPY.
//
// A batch of at least copyMinJobs jobs without idempotency keys (an
// EnqueueMany of a bulk import, or calls merged by the group writer) is
// written with COPY rather than one INSERT ... SELECT FROM unnest of ten
// arrays: the rows travel in COPY's binary format, and the server inserts
// them without planning a statement, unnesting arrays or projecting
// them. In one transaction:
//
//  1. the batch's ids are drawn from the jobs' sequence in one statement
//     (nextval over generate_series, returned as one array; sorted, so the
//     n-th id is the n-th job's, and ids increase in input order as with
//     the statement);
//  2. COPY jobs (id, queue, ...) FROM STDIN writes the rows with them;
//  3. one statement adds the enqueued counters and sends one
//     notification per queue, as the statement does.
//
// No conflict is possible without keys, so nothing is skipped and no row
// is read back. A batch with keys keeps the statement with ON CONFLICT
// (see enqueueOn), which answers each taken key with its job atomically.
// Smaller batches keep the one-round-trip statement: the transaction's
// four round trips cost more than the statement saves on a few rows.

// copyMinJobs is the smallest keyless batch written with COPY.
const copyMinJobs = 200

// copyColumns are the columns COPY writes, in the order of copyRow.
var copyColumns = []string{"id", "queue", "kind", "payload", "state", "max_retries", "policy", "dependency", "reprocessable", "created_at", "run_at", "priority", "trace", "trace_packed"}

// useCopy reports whether the batch is written with COPY.
func useCopy(jobs []store.NewJob, b *enqueueBatch) bool {
	return !b.hasKeys && len(jobs) >= copyMinJobs
}

// enqueueCopy writes a keyless batch with COPY (see above) and returns
// its jobs, in input order.
func (s *Store) enqueueCopy(ctx context.Context, jobs []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
	n := len(jobs)
	ids := make([]int64, 0, n)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		ids = ids[:0]
		// One array rather than n rows: the ids travel as one value.
		if err := tx.QueryRow(ctx, `SELECT array_agg(nextval('`+s.schema+`.jobs_id_seq')) FROM generate_series(1, $1)`, n).Scan(&ids); err != nil {
			return err
		}
		if len(ids) != n {
			return fmt.Errorf("drew %d ids, want %d", len(ids), n)
		}
		slices.Sort(ids)
		row := make([]any, len(copyColumns))
		copied, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "jobs"}, copyColumns, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			var policy any
			if b.policies[i] != nil {
				policy = b.policies[i]
			}
			row[0], row[1], row[2], row[3], row[4] = ids[i], b.queues[i], b.kinds[i], b.payloads[i], b.states[i]
			row[5], row[6], row[7], row[8], row[9], row[10] = b.maxRetries[i], policy, b.deps[i], b.reproc[i], b.nows[i], b.runAts[i]
			row[11] = b.priorities[i]
			row[12], row[13] = nil, nil
			if b.packed[i] != nil {
				row[13] = b.packed[i]
			} else if b.traces[i] != "" {
				row[12] = b.traces[i]
			}
			return row, nil
		}))
		if err != nil {
			return err
		}
		if copied != int64(n) {
			return fmt.Errorf("copied %d rows, want %d", copied, n)
		}
		queues, counts := countQueues(b.queues)
		_, err = tx.Exec(ctx, s.copyTailSQL(), queues, counts, shard())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]*store.Job, n)
	for i := range jobs {
		out[i] = b.job(i, ids[i], &jobs[i])
	}
	return out, nil
}

// copyTailSQL adds the enqueued counters ($1 queues, $2 counts, $3 the
// counter shard) and notifies each queue once.
func (s *Store) copyTailSQL() string {
	return `WITH cnt AS (
	INSERT INTO ` + s.sql.counters + ` AS c (queue, name, shard, n)
	SELECT queue, 'enqueued', $3::smallint, n FROM unnest($1::text[], $2::bigint[]) AS t(queue, n) ORDER BY queue
	` + upsertCounters + `
)
SELECT count(pg_notify('` + s.channel + `', queue)) FROM unnest($1::text[]) AS t(queue)`
}

// countQueues returns the distinct queues, sorted, and the number of
// times each occurs.
func countQueues(queues []string) ([]string, []int64) {
	m := map[string]int64{}
	for _, q := range queues {
		m[q]++
	}
	names := make([]string, 0, len(m))
	for q := range m {
		names = append(names, q)
	}
	slices.Sort(names)
	counts := make([]int64, len(names))
	for i, q := range names {
		counts[i] = m[q]
	}
	return names, counts
}
