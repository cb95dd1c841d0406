package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive/store"
)

// jobColumns lists a job's columns, without the history, in the order
// scanJob reads them.
var jobColumns = []string{"id", "queue", "kind", "payload", "state", "attempt", "max_retries", "policy", "idem_key", "dependency", "reprocessable",
	"created_at", "run_at", "attempted_at", "finished_at", "lease_until", "worker", "cancel_requested", "retry_count",
	"last_error", "last_error_class", "last_failed_at", "dead_at", "dead_reason", "fingerprint", "redriven", "last_duration", "last_delay",
	"progress_done", "progress_total", "progress_at", "replay_of", "lease", "priority", "trace", "trace_packed"}

// cols returns the job columns, each prefixed with prefix, plus the
// history when withHistory.
func cols(prefix string, withHistory bool) string {
	out := make([]string, 0, len(jobColumns)+1)
	for _, c := range jobColumns {
		out = append(out, prefix+c)
	}
	if withHistory {
		out = append(out, prefix+"history")
	}
	return strings.Join(out, ", ")
}

// statements are the fixed SQL texts of one store, rendered for its
// schema and channel.
type statements struct {
	jobs, counters        string // qualified table names
	jobCounts             string
	deadGroups            string
	deadBounds            string // dead_error_bounds (migration 0044)
	keys                  string
	enqueue               string
	enqueuePlain          string
	enqueueFlow           string
	byKeys                string
	fetch                 string
	finish                string
	complete              string
	heartbeat             string
	progress              string
	expired               string
	get                   string
	nextDue, nextDueAfter string
	cancelLock            string
	cancelNow             string
	cancelRunning         string
	cancelNotify          string
	counterOne            string
	redrive               string
	deleteFinished        string
	stats                 string
	keptKeys              string
	insertDead            string
	// Concurrency limits (limits.go).
	limitedSelect, limitedLease, ratePrune string
	unlimitedAbove                         string
	limitedDue                             string
	limitEnsure, limitJobs, limitChange    string
	limitCreate                            string
	limitHolds                             string
	limitList, limitGen, limitNextDue      string
	// Fair shares (fairshare.go).
	fair fairStatements
}

// keepKeysSQL keeps the keys of the jobs a DELETE ... RETURNING (named
// del) deleted.
const keepKeysSQL = `INSERT INTO {keys} (key, job_id, queue, kind, state, created_at, finished_at, deleted_at)
	SELECT idem_key, id, queue, kind, state, created_at, finished_at, now() FROM del WHERE idem_key IS NOT NULL
	ON CONFLICT (key) DO NOTHING`

// upsertCounters is the tail of an INSERT INTO counters ... SELECT that
// adds to existing rows.
const upsertCounters = `ON CONFLICT (queue, name, shard) DO UPDATE SET n = c.n + excluded.n`

// appliedCounters is the CTE (named cnt) of a Finish statement that adds
// the counters of the outcomes applied (the ords the CTE upd returns):
// parameters $first to $first+3 are the counters' ords, queues, names and
// amounts (see outcomeCounters), $first+4 the counter shard. It is
// rendered with the statement.
func appliedCounters(first int) string {
	p := func(i int) string { return "$" + strconv.Itoa(first+i) }
	return `cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT x.queue, x.name, ` + p(4) + `::smallint, sum(x.n)
	FROM unnest(` + p(0) + `::int[], ` + p(1) + `::text[], ` + p(2) + `::text[], ` + p(3) + `::bigint[]) AS x(ord, queue, name, n)
	WHERE x.ord IN (SELECT ord FROM upd)
	GROUP BY x.queue, x.name HAVING sum(x.n) <> 0
	ORDER BY x.queue, x.name
	{upsert}
)`
}

// render builds the statements for the quoted schema and the channel.
func render(schema, channel string) statements {
	r := strings.NewReplacer(
		"{jobs}", schema+".jobs",
		"{schema}", schema,
		"{limits}", schema+".conc_limits",
		"{rates}", schema+".limit_rates",
		"{now}", "$5::timestamptz",
		"{limitgen}", schema+".limit_gen",
		"{counters}", schema+".counters",
		"{jobcounts}", schema+".job_counts",
		"{keys}", schema+".idem_keys",
		"{seq}", "'"+schema+".jobs_id_seq'",
		"{notify}", "pg_notify('"+channel+"', ",
		"{upsert}", upsertCounters,
		"{cols}", cols("", false),
		"{jcols}", cols("j.", false),
		"{hcols}", cols("", true),
		"{complete}", fmt.Sprint(int(store.Complete)),
		"{retry}", fmt.Sprint(int(store.Retry)),
		"{bury}", fmt.Sprint(int(store.Bury)),
		"{snooze}", fmt.Sprint(int(store.Snooze)),
		"{release}", fmt.Sprint(int(store.Release)),
		"{cancel}", fmt.Sprint(int(store.Cancel)),
	)
	// {ends}, in an UPDATE of jobs j from outcomes o, reads of the row
	// before the update whether the outcome ends the job canceled.
	q := func(s string) string {
		return r.Replace(strings.ReplaceAll(s, "{ends}", "(j.cancel_requested AND o.kind IN ({retry}, {snooze}, {release}))"))
	}
	return statements{
		limitedSelect:  q(limitedSelectSQL),
		limitedLease:   q(limitedLeaseSQL),
		unlimitedAbove: q(unlimitedAboveSQL),
		ratePrune:      q(ratePruneSQL),
		limitHolds:     q(limitHoldsSQL),
		limitedDue:     q(limitedDueSQL),
		limitEnsure:    q(limitEnsureSQL),
		limitJobs:      q(limitJobsSQL),
		limitChange:    q(limitChangeSQL),
		limitCreate:    q(limitCreateSQL),
		limitList:      q(limitListSQL),
		limitGen:       q(limitGenSQL),
		limitNextDue:   q(limitNextDueSQL),
		fair:           renderFair(q),
		jobs:           schema + ".jobs",
		counters:       schema + ".counters",
		jobCounts:      schema + ".job_counts",
		deadGroups:     schema + ".dead_groups",
		deadBounds:     schema + ".dead_error_bounds",
		keys:           schema + ".idem_keys",

		// Enqueue: ids are drawn in input order (nextval over the ordered
		// rows), then the rows are inserted in key order, so that two
		// batches taking the same keys wait for each other in one order
		// and never deadlock. A row whose key is taken is skipped; the
		// caller reads the job holding it. The counters count the rows
		// inserted and the rows answered by an existing job.
		enqueue: q(`WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::int[], $6::bytea[], $7::text[], $8::text[], $9::bool[], $10::timestamptz[], $11::bool[], $12::timestamptz[], $14::smallint[], $15::text[], $16::bytea[])
		WITH ORDINALITY AS t(queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable, run_at, is_new, created_at, priority, trace, trace_packed, ord)
), fresh AS MATERIALIZED (
	SELECT nextval({seq}::regclass) AS id, f.* FROM (SELECT * FROM input WHERE is_new ORDER BY ord) f
), ins AS (
	INSERT INTO {jobs} (id, queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable, created_at, run_at, priority, trace, trace_packed)
	SELECT id, queue, kind, payload, state, max_retries, policy, NULLIF(idem_key, ''), dependency, reprocessable, created_at, run_at, priority,
		CASE WHEN trace_packed IS NULL THEN NULLIF(trace, '') END, trace_packed
	FROM fresh ORDER BY idem_key NULLS FIRST, id
	ON CONFLICT (idem_key) WHERE idem_key IS NOT NULL DO NOTHING
	RETURNING id, queue, {notify}queue) AS notified
), done AS (
	SELECT f.ord, f.id, f.queue FROM fresh f JOIN ins USING (id)
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT queue, name, $13::smallint, n FROM (
		SELECT queue, 'enqueued' AS name, count(*) AS n FROM done GROUP BY queue
		UNION ALL
		SELECT i.queue, 'deduplicated', count(*) FROM input i WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.ord = i.ord) GROUP BY i.queue
	) x ORDER BY queue, name
	{upsert}
)
SELECT ord, id FROM done`),

		// enqueuePlain is Enqueue for a batch without idempotency keys: no
		// conflict is possible, so one plain insert in input order (ids come
		// from the sequence in the order the rows are inserted), one
		// notification per queue, and the counters. The caller sorts the
		// returned ids: the n-th smallest is the n-th job.
		enqueuePlain: q(`WITH ins AS (
	INSERT INTO {jobs} (queue, kind, payload, state, max_retries, policy, dependency, reprocessable, created_at, run_at, priority, trace, trace_packed)
	SELECT queue, kind, payload, state, max_retries, policy, dependency, reprocessable, created_at, run_at, priority,
		CASE WHEN trace_packed IS NULL THEN NULLIF(trace, '') END, trace_packed
	FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::int[], $6::bytea[], $7::text[], $8::bool[], $9::timestamptz[], $10::timestamptz[], $12::smallint[], $13::text[], $14::bytea[])
		AS t(queue, kind, payload, state, max_retries, policy, dependency, reprocessable, run_at, created_at, priority, trace, trace_packed)
	RETURNING id, queue
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT queue, 'enqueued', $11::smallint, count(*) FROM ins GROUP BY queue ORDER BY queue
	{upsert}
), ntf AS (
	SELECT count({notify}queue)) AS n FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT id FROM ins CROSS JOIN ntf`),

		// enqueueFlow is enqueuePlain for the jobs of workflows
		// (EnqueueWorkflow and EnqueueWorkflows without idempotency keys
		// on jobs): each row inserted once with its state (blocked for a
		// job with dependencies and a callback), its node and its
		// workflow ($15, 0 for a callback: NULL). Only the queues of the
		// jobs not blocked are notified.
		enqueueFlow: q(`WITH ins AS (
	INSERT INTO {jobs} (queue, kind, payload, state, max_retries, policy, dependency, reprocessable, created_at, run_at, priority, trace, trace_packed, flow, node)
	SELECT queue, kind, payload, state, max_retries, policy, dependency, reprocessable, created_at, run_at, priority,
		CASE WHEN trace_packed IS NULL THEN NULLIF(trace, '') END, trace_packed, NULLIF(flow, 0), node
	FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::int[], $6::bytea[], $7::text[], $8::bool[], $9::timestamptz[], $10::timestamptz[], $12::smallint[], $13::text[], $14::bytea[], $15::bigint[], $16::text[])
		WITH ORDINALITY AS t(queue, kind, payload, state, max_retries, policy, dependency, reprocessable, run_at, created_at, priority, trace, trace_packed, flow, node, ord)
	ORDER BY ord
	RETURNING id, queue, state
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT queue, 'enqueued', $11::smallint, count(*) FROM ins GROUP BY queue ORDER BY queue
	{upsert}
), ntf AS (
	SELECT count({notify}queue)) AS n FROM (SELECT DISTINCT queue FROM ins WHERE state <> 'blocked') q
)
SELECT id FROM ins CROSS JOIN ntf`),

		byKeys: q(`SELECT {hcols} FROM {jobs} WHERE idem_key = ANY($1::text[])`),

		// keptKeys reads the kept keys of deleted jobs.
		keptKeys: q(`SELECT key, job_id, queue, kind, state, created_at, finished_at FROM {keys} WHERE key = ANY($1::text[])`),

		// Fetch: lock the due rows (skipping rows other fetchers hold),
		// lease them, count the attempts (every row locked is leased). The
		// update is the statement itself, so that its rows go to the client
		// as they are written, not through a buffered CTE. The leased rows
		// are joined by id: written as id = ANY(ARRAY(...)), the
		// statement's generic plan, made while the table was small, kept a
		// sequential scan as it grew (fetches of 20-57 ms under an enqueue
		// flood).
		//
		// Highest priority first, in two steps. top probes the queue's
		// highest waiting priority (one probe of jobs_ready, read
		// backwards) and more the next lower one (one probe more). With
		// one priority (the common case: every job at the default), that
		// priority is the only one read: job_priorities, a PL/pgSQL
		// function (migration 0015), is not called (its gate is a
		// one-time filter on more), which saves its call, about
		// 0.8 million server instructions a fetch, a few thousand a job
		// at the engine's usual batch sizes (docs/BENCHMARKS.md, "The
		// plain fetch at one priority, counted"). With several,
		// job_priorities walks the distinct priorities of the queue's
		// waiting jobs, highest first, one probe of jobs_ready each.
		// picked reads each priority's due jobs as one range of the index,
		// oldest due first, until it has the limit. Jobs of a higher
		// priority due later are skipped by a probe, never walked.
		fetch: q(`WITH top AS MATERIALIZED (
	SELECT priority AS p FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text
	ORDER BY priority DESC LIMIT 1
), more AS MATERIALIZED (
	SELECT priority FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text
		AND priority < (SELECT p FROM top)
	ORDER BY priority DESC LIMIT 1
), prio AS (
	SELECT p FROM top WHERE NOT EXISTS (SELECT FROM more)
	UNION ALL
	SELECT f.p FROM {schema}.job_priorities($1::text) AS f(p) WHERE EXISTS (SELECT FROM more)
), picked AS (
	SELECT d.id FROM prio CROSS JOIN LATERAL (
		SELECT id FROM {jobs}
		WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = prio.p AND run_at <= $2
		ORDER BY run_at, id LIMIT $3
		FOR UPDATE SKIP LOCKED) d
	LIMIT $3
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT $1::text, 'attempts', $7::smallint, count(*) FROM picked HAVING count(*) > 0
	{upsert}
)
UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease = j.lease + 1, attempted_at = GREATEST($4, j.run_at), lease_until = $5, worker = $6,
	progress_done = NULL, progress_total = NULL, progress_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING {jcols}`),

		// Finish: every outcome in one UPDATE, fenced on the running
		// lease and worker, and for a rescue (expired_by not NULL) on
		// the lease being still expired; of several outcomes of one
		// fence, the first that holds (the others are rescues before it,
		// whose leases were renewed, or come after it); the counters of the applied
		// outcomes only. A retry, snooze or release of a job whose
		// cancellation was requested ({ends}, read of the row before the
		// update) ends it canceled instead, with the outcome's event and
		// cancel_event: its row is -1 - ord, and its counters are those
		// sent under that number (store.Outcome.CanceledCounters). An
		// applied retry or bury with a hold (hold > 0, unix
		// microseconds: store.Outcome.HoldUntil) of a job under a limit
		// that holds on Retry-After holds the job's group until then
		// (hold), rows locked in (name, key) order.
		// follows ($27) marks the outcomes after another of their fence
		// in the call: only those look for an earlier one that holds. As
		// a plain anti join, that search was a nested loop over the
		// whole batch for every row in the generic plan (which estimates
		// the unnest at 10 rows): 9M comparisons, 7 s, for 3000 outcomes.
		finish: q(`WITH o AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int[], $19::bigint[], $20::bigint[],
		$21::bigint[], $22::bigint[], $23::timestamptz[], $24::timestamptz[], $25::text[], $26::bigint[], $27::bool[], $28::bytea[])
		AS t(id, lease, worker, kind, state, at, run_at, event, error, class, dead_reason, fingerprint, ord, duration, delay,
			progress_done, progress_total, progress_at, expired_by, cancel_event, hold, follows, result)
), upd AS (
	UPDATE {jobs} j SET
		state = CASE WHEN {ends} THEN 'canceled' ELSE o.state END,
		run_at = CASE WHEN {ends} THEN j.run_at WHEN o.kind IN ({retry}, {snooze}) THEN o.run_at WHEN o.kind = {release} THEN least(j.run_at, o.run_at) ELSE j.run_at END,
		attempt = CASE WHEN o.kind IN ({snooze}, {release}) AND NOT j.cancel_requested THEN j.attempt - 1 ELSE j.attempt END,
		retry_count = CASE WHEN o.kind = {retry} AND NOT j.cancel_requested THEN j.retry_count + 1 ELSE j.retry_count END,
		last_error = CASE WHEN o.kind IN ({retry}, {bury}) THEN o.error ELSE j.last_error END,
		last_error_class = CASE WHEN o.kind IN ({retry}, {bury}) THEN o.class ELSE j.last_error_class END,
		last_failed_at = CASE WHEN o.kind IN ({retry}, {bury}) THEN o.at ELSE j.last_failed_at END,
		finished_at = CASE WHEN o.kind IN ({complete}, {bury}, {cancel}) OR {ends} THEN o.at ELSE j.finished_at END,
		last_duration = CASE WHEN o.kind IN ({complete}, {retry}, {bury}) THEN o.duration ELSE j.last_duration END,
		last_delay = CASE WHEN o.kind = {retry} AND NOT j.cancel_requested THEN o.delay ELSE j.last_delay END,
		dead_at = CASE WHEN o.kind = {bury} THEN o.at ELSE j.dead_at END,
		dead_reason = CASE WHEN o.kind = {bury} THEN o.dead_reason ELSE j.dead_reason END,
		fingerprint = CASE WHEN o.kind = {bury} THEN o.fingerprint ELSE j.fingerprint END,
		cancel_requested = false,
		progress_done = CASE WHEN o.kind <> {complete} THEN NULL WHEN o.progress_done IS NULL THEN j.progress_done ELSE o.progress_done END,
		progress_total = CASE WHEN o.kind <> {complete} THEN NULL WHEN o.progress_done IS NULL THEN j.progress_total ELSE o.progress_total END,
		progress_at = CASE WHEN o.kind <> {complete} THEN NULL WHEN o.progress_done IS NULL THEN j.progress_at ELSE o.progress_at END,
		lease_until = NULL,
		worker = NULL,
		result = CASE WHEN o.kind = {complete} THEN o.result ELSE j.result END,
		history = CASE
			WHEN {ends} THEN j.history || (CASE WHEN o.event = '' THEN '[]'::jsonb ELSE jsonb_build_array(o.event::jsonb) END)
				|| jsonb_build_array(o.cancel_event::jsonb)
			WHEN o.event = '' THEN j.history
			ELSE j.history || jsonb_build_array(o.event::jsonb) END
	FROM o
	WHERE j.id = o.id AND j.state = 'running' AND j.lease = o.lease AND j.worker = o.worker
		AND (o.expired_by IS NULL OR j.lease_until < o.expired_by)
		AND (NOT o.follows OR NOT EXISTS (SELECT 1 FROM o p WHERE p.id = o.id AND p.lease = o.lease AND p.worker = o.worker AND p.ord < o.ord
			AND (p.expired_by IS NULL OR j.lease_until < p.expired_by)))
	RETURNING CASE WHEN j.state = 'canceled' AND o.kind IN ({retry}, {snooze}, {release}) THEN -1 - o.ord ELSE o.ord END AS ord,
		CASE WHEN j.state IN ('pending', 'scheduled') THEN {notify}j.queue) END AS notified, j.climit, j.ckey, o.hold
), hold AS (
	INSERT INTO {rates} AS x (name, key, tat, held_until)
	SELECT u.climit, u.ckey, 0, max(u.hold) FROM upd u JOIN {limits} l ON l.name = u.climit AND l.hold_retry_after
	WHERE u.hold > 0 AND u.ord >= 0
	GROUP BY u.climit, u.ckey ORDER BY u.climit, u.ckey
	ON CONFLICT (name, key) DO UPDATE SET held_until = GREATEST(x.held_until, excluded.held_until)
), ` + appliedCounters(14) + `
SELECT ord FROM upd`),

		// complete: Finish for completions without event or progress, of
		// one worker and distinct jobs (the common case: a busy worker's
		// completions), setting only what a completion changes; fenced as
		// finish. The ids come sorted and distinct, so each row finds its
		// position k in them by binary search (width_bucket), and its
		// attempt, finish time and duration at k in arrays of fixed-width
		// elements (read at an offset, not walked). The counters come as
		// groups: each outcome names the group of its counters ($6, by
		// position), and each group's counters are added once per applied
		// outcome of the group. Rows are the positions of the applied
		// outcomes (1-based). The fence is the lease token ($2), read as
		// the finish time and duration are.
		complete: q(`WITH upd AS (
	UPDATE {jobs} j SET state = 'completed',
		finished_at = ($3::timestamptz[])[width_bucket(j.id, $1::bigint[])],
		last_duration = ($4::bigint[])[width_bucket(j.id, $1::bigint[])],
		cancel_requested = false, lease_until = NULL, worker = NULL
	WHERE j.id = ANY($1::bigint[]) AND j.state = 'running' AND j.worker = $5::text
		AND j.lease = ($2::bigint[])[width_bucket(j.id, $1::bigint[])]
	RETURNING width_bucket(j.id, $1::bigint[]) AS k
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT g.queue, g.name, $11::smallint, sum(g.n * u.applied)
	FROM (SELECT ($6::int[])[k] AS grp, count(*) AS applied FROM upd GROUP BY 1) u
	JOIN unnest($7::int[], $8::text[], $9::text[], $10::bigint[]) AS g(grp, queue, name, n) USING (grp)
	GROUP BY g.queue, g.name HAVING sum(g.n * u.applied) <> 0
	ORDER BY g.queue, g.name
	{upsert}
)
SELECT k FROM upd`),

		// Heartbeat: the leases of distinct jobs, sorted by id ($3) with
		// their tokens ($4, found by binary search over the ids as the
		// completions find theirs), renewed if the worker still holds
		// them, whether or not they had expired.
		heartbeat: q(`UPDATE {jobs} SET lease_until = $1
	WHERE state = 'running' AND worker = $2 AND id = ANY($3::bigint[]) AND lease = ($4::bigint[])[width_bucket(id, $3::bigint[])]
	RETURNING id, cancel_requested`),

		// Progress: fenced on the running lease and worker, as Finish;
		// rows locked in id order, as Heartbeat locks them.
		progress: q(`UPDATE {jobs} j SET progress_done = u.done, progress_total = u.total, progress_at = u.at
	FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::timestamptz[]) AS u(id, lease, done, total, at)
	WHERE j.id = u.id AND j.state = 'running' AND j.lease = u.lease AND j.worker = $6`),

		expired: q(`SELECT {cols} FROM {jobs} WHERE state = 'running' AND lease_until < $1 ORDER BY lease_until, id LIMIT $2`),

		get: q(`SELECT {hcols}, result FROM {jobs} WHERE id = $1`),

		// NextDue: the earliest run_at of each distinct priority of the
		// queue's waiting jobs, in two indexes: without a limit
		// (job_priorities, one probe of jobs_ready each) and under one
		// (job_limit_priorities, one probe of jobs_limit_due each), and
		// the fair jobs' earliest (one probe of jobs_fair_first).
		nextDue: q(`SELECT least((SELECT min((SELECT run_at FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = p.p
	ORDER BY run_at LIMIT 1)) FROM {schema}.job_priorities($1::text) AS p(p)),
	(SELECT min((SELECT run_at FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = $1::text AND priority = p.p
	ORDER BY run_at LIMIT 1)) FROM {schema}.job_limit_priorities($1::text) AS p(p)),
	(SELECT run_at FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text ORDER BY run_at LIMIT 1))`),

		// nextDueAfter is nextDue of the jobs due after $2.
		nextDueAfter: q(`SELECT least((SELECT min((SELECT run_at FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = p.p
	AND run_at > $2 ORDER BY run_at LIMIT 1)) FROM {schema}.job_priorities($1::text) AS p(p)),
	(SELECT min((SELECT run_at FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = $1::text AND priority = p.p
	AND run_at > $2 ORDER BY run_at LIMIT 1)) FROM {schema}.job_limit_priorities($1::text) AS p(p)),
	(SELECT run_at FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text AND run_at > $2 ORDER BY run_at LIMIT 1))`),

		cancelLock: q(`SELECT state, queue FROM {jobs} WHERE id = $1 FOR UPDATE`),
		cancelNow: q(`UPDATE {jobs} SET state = 'canceled', finished_at = $2, history = history || jsonb_build_array($3::jsonb)
	WHERE id = $1 RETURNING {hcols}`),
		cancelRunning: q(`UPDATE {jobs} SET cancel_requested = true WHERE id = $1 RETURNING {hcols}`),
		counterOne:    q(`INSERT INTO {counters} AS c (queue, name, shard, n) VALUES ($1, $2, $3, $4) {upsert}`),

		// cancelNotify tells the listening workers, on commit, that a
		// running job's cancellation was requested (store.CancelNotice).
		cancelNotify: q(`SELECT {notify}$1::text)`),

		// Redrive: the dead reprocessable jobs go back to pending; the dead
		// ones marked not reprocessable are reported as refused.
		redrive: q(`WITH upd AS (
	UPDATE {jobs} SET state = 'pending', run_at = $2, attempt = 0, retry_count = 0, redriven = redriven + 1,
		dead_at = NULL, last_delay = NULL, dead_reason = '', finished_at = NULL, payload = coalesce($3, payload),
		ckey = CASE WHEN $3::bytea IS NULL OR climit IS NULL THEN ckey ELSE coalesce($6::jsonb ->> climit, ckey) END,
		fkey = CASE WHEN $3::bytea IS NULL OR fkey IS NULL THEN fkey ELSE coalesce($7::jsonb ->> queue, fkey) END,
		history = history || jsonb_build_array(CASE WHEN $3::bytea IS NULL THEN $4::jsonb
			ELSE $4::jsonb || jsonb_build_object('previous_payload', CASE WHEN substring(payload from 1 for 7) = convert_to('"rdenc:', 'UTF8')
				THEN convert_from(payload, 'UTF8') ELSE left(convert_from(payload, 'UTF8'), ` + fmt.Sprint(store.MaxPreviousPayload) + `) END) END)
	WHERE id = ANY($1::bigint[]) AND state = 'dead' AND reprocessable
	RETURNING id, queue, {notify}queue) AS notified
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT queue, 'redriven', $5::smallint, count(*) FROM upd GROUP BY queue ORDER BY queue
	{upsert}
)
SELECT id, true FROM upd
UNION ALL
SELECT id, false FROM {jobs} WHERE id = ANY($1::bigint[]) AND state = 'dead' AND NOT reprocessable`),

		// AddDead (dead.go): the jobs that died elsewhere, inserted dead
		// by one statement, as enqueue inserts keyed jobs: ids drawn in
		// input order, rows inserted in key order (two calls taking the
		// same keys wait for each other in one order), a row whose key is
		// taken skipped (the caller reads the job holding it). $20 is each
		// job's dead counter, $21 whether the row is inserted at all (a key
		// twice in one call is inserted once), $22 the counter shard. Each
		// row inserted is returned as Get returns it, with its input ord.
		insertDead: q(`WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int[], $5::int[], $6::text[], $7::text[], $8::bool[], $9::timestamptz[],
		$10::timestamptz[], $11::int[], $12::text[], $13::text[], $14::text[], $15::text[], $16::int[], $17::text[], $18::text[], $19::bytea[],
		$20::text[], $21::bool[])
		WITH ORDINALITY AS t(queue, kind, payload, attempt, max_retries, idem_key, dependency, reprocessable, created_at,
		dead_at, retry_count, last_error, last_error_class, dead_reason, fingerprint, redriven, history, trace, trace_packed,
		counter, is_new, ord)
), fresh AS MATERIALIZED (
	SELECT nextval({seq}::regclass) AS id, f.* FROM (SELECT * FROM input WHERE is_new ORDER BY ord) f
), ins AS (
	INSERT INTO {jobs} (id, queue, kind, payload, state, attempt, max_retries, idem_key, dependency, reprocessable,
		created_at, run_at, finished_at, retry_count, last_error, last_error_class, last_failed_at, dead_at, dead_reason, fingerprint,
		redriven, history, trace, trace_packed)
	SELECT id, queue, kind, payload, 'dead', attempt, max_retries, NULLIF(idem_key, ''), dependency, reprocessable,
		created_at, dead_at, dead_at, retry_count, last_error, last_error_class, dead_at, dead_at, dead_reason, fingerprint,
		redriven, history::jsonb, CASE WHEN trace_packed IS NULL THEN NULLIF(trace, '') END, trace_packed
	FROM fresh ORDER BY idem_key NULLS FIRST, id
	ON CONFLICT (idem_key) WHERE idem_key IS NOT NULL DO NOTHING
	RETURNING {hcols}
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT f.queue, f.counter, $22::smallint, count(*) FROM fresh f JOIN ins USING (id) GROUP BY f.queue, f.counter ORDER BY 1, 2
	{upsert}
)
SELECT ins.*, fresh.ord FROM ins JOIN fresh USING (id)`),

		// DeleteFinished: dead jobs expired by retention count as purged.
		deleteFinished: q(`WITH del AS (
	DELETE FROM {jobs} WHERE id IN (
		SELECT id FROM {jobs} WHERE state = $1 AND finished_at < $2
		ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED)
	RETURNING queue, state, idem_key, id, kind, created_at, finished_at
), keep AS (
	` + keepKeysSQL + `
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT queue, 'purged', $4::smallint, count(*) FROM del WHERE state = 'dead' GROUP BY queue ORDER BY queue
	{upsert}
)
SELECT count(*) FROM del`),

		// Stats: the job counts kept by the triggers on jobs (see migration
		// 0011), summed over their shards, and the counters.
		stats: q(`SELECT true, queue, state, sum(n)::bigint FROM {jobcounts} GROUP BY queue, state HAVING sum(n) <> 0
UNION ALL
SELECT false, queue, name, sum(n)::bigint FROM {counters} GROUP BY queue, name`),
	}
}

// purgeSQL deletes up to a limit of the dead jobs matching where (whose
// arguments come first) and counts them as purged.
func (s *Store) purgeSQL(where string, limitArg, shardArg string) string {
	return `WITH del AS (
	DELETE FROM ` + s.sql.jobs + ` WHERE id IN (
		SELECT id FROM ` + s.sql.jobs + ` WHERE ` + where + ` LIMIT ` + limitArg + ` FOR UPDATE SKIP LOCKED)
	RETURNING queue, state, idem_key, id, kind, created_at, finished_at
), keep AS (
	` + strings.ReplaceAll(keepKeysSQL, "{keys}", s.sql.keys) + `
), cnt AS (
	INSERT INTO ` + s.sql.counters + ` AS c (queue, name, shard, n)
	SELECT queue, 'purged', ` + shardArg + `::smallint, count(*) FROM del GROUP BY queue ORDER BY queue
	` + upsertCounters + `
)
SELECT count(*) FROM del`
}
