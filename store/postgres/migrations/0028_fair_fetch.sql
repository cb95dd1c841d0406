-- redrive PostgreSQL schema: the fair fetch in one call, fair keys in
-- byte order (see docs/design.md, "Fair shares").
--
-- Fair keys compare by bytes. The round robin over a priority's keys
-- goes on after "the last key served" (fkey > cursor); under a
-- linguistic collation (en_US.UTF-8, ICU) the database's order of the
-- keys is not the order the round robin's turns are counted in, and
-- differs from SQLite's (BINARY): keys differing in case or punctuation
-- were served in another order, and a fetch could give some keys a
-- turn twice and others none. Giving the column the "C" collation makes
-- every comparison, index and ORDER BY on it byte order, whatever the
-- database's collation. A change of collation within text rewrites no
-- row; it rebuilds the indexes that name fkey in their columns or their
-- condition (jobs_ready, jobs_fair_due, jobs_fair_first: every waiting
-- job without a limit is in one of them) and holds jobs locked for that
-- time (one pass over the table).
ALTER TABLE jobs ALTER COLUMN fkey TYPE text COLLATE "C";

-- job_fair_fetch is the fair fetch of a queue (store.FairLevel over each
-- priority, highest first) in one call, so that a fetch is one round
-- trip rather than one per key visited: it leases up to want due jobs
-- without a limit, priority by priority, a priority's fair keys by
-- deficit round robin with its due jobs without a fair key taking turns
-- with them as one more key (after every key, weight 1), a priority
-- without fair jobs oldest due first; it counts the attempts. It is a
-- port of store.FairRound, which documents the walk (turns, the
-- multiplier m, reservations); the two must change together, and
-- TestFairFetchMatchesFairLevel compares them.
--
-- The cursors (where the process's previous fetch stopped, per priority)
-- are the caller's: cprios, ckeys, cused and cunk give them (cunk: the
-- cursor is at the jobs without a fair key, ckeys NULL), and the
-- function returns the moved cursors as rows with out_prio set and
-- out_job NULL, and the leased jobs as rows with out_job set. wkeys and
-- wvals are the keys' weights (1 for a key not in them).
--
-- Inside the function, the place of the jobs without a fair key is the
-- text unk: 64 times U+10FFFF, which sorts after every key (a key holds
-- at most 200 bytes of UTF-8) and is never a key.
CREATE FUNCTION job_fair_fetch(q text, due_by timestamptz, now_ts timestamptz, lease_to timestamptz, wname text, want int,
    wkeys text[], wvals int[], cprios smallint[], ckeys text[], cused int[], cunk boolean[], cshard smallint)
RETURNS TABLE (out_prio smallint, out_key text, out_used int, out_unk boolean, out_job jobs)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT AS $$
DECLARE
    unk text COLLATE "C" := repeat(chr(1114111), 64);
    wj jsonb := coalesce(jsonb_object(wkeys, wvals::text[]), '{}');
    levels smallint[];
    unkeyed smallint[];
    li int := 1;
    ui int := 1;
    got int := 0;
    prio smallint;
    mixed boolean;
    ci int;
    -- the cursor of the priority: FairCursor
    cur_key text COLLATE "C";
    cur_used int;
    cur_set boolean;
    -- FairRound's state
    visits int;
    idle_from text COLLATE "C";
    turn_start text COLLATE "C";
    prev text COLLATE "C";
    k text COLLATE "C";
    m int;
    sumw int;
    full_keys text[];
    reserved text[];
    reserved_left int;
    quota int;
    ask int;
    n int;
    w int;
    resumed boolean;
    wrapped boolean;
    found_key boolean;
BEGIN
    SELECT coalesce(array_agg(p), '{}') INTO levels FROM job_fair_priorities(q) AS pr(p);
    SELECT coalesce(array_agg(pr.p), '{}') INTO unkeyed FROM job_priorities(q) AS pr(p) WHERE EXISTS (SELECT 1 FROM jobs
        WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q AND priority = pr.p AND run_at <= due_by);
    WHILE got < want AND (li <= cardinality(levels) OR ui <= cardinality(unkeyed)) LOOP
        IF ui <= cardinality(unkeyed) AND (li > cardinality(levels) OR unkeyed[ui] > levels[li]) THEN
            -- A priority of jobs without a fair key only.
            RETURN QUERY WITH picked AS (
                SELECT id FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q AND priority = unkeyed[ui] AND run_at <= due_by
                ORDER BY run_at, id LIMIT want - got
                FOR UPDATE SKIP LOCKED)
            UPDATE jobs AS u SET state = 'running', attempt = u.attempt + 1, lease = u.lease + 1, attempted_at = GREATEST(now_ts, u.run_at), lease_until = lease_to, worker = wname,
                progress_done = NULL, progress_total = NULL, progress_at = NULL
            FROM picked WHERE u.id = picked.id
            RETURNING NULL::smallint, NULL::text, NULL::int, NULL::boolean, u;
            GET DIAGNOSTICS n = ROW_COUNT;
            got := got + n;
            ui := ui + 1;
            CONTINUE;
        END IF;
        prio := levels[li];
        li := li + 1;
        mixed := ui <= cardinality(unkeyed) AND unkeyed[ui] = prio;
        IF mixed THEN
            ui := ui + 1;
        END IF;
        ci := array_position(cprios, prio);
        cur_set := ci IS NOT NULL;
        cur_key := CASE WHEN NOT cur_set THEN '' WHEN cunk[ci] THEN unk ELSE ckeys[ci] END;
        cur_used := CASE WHEN cur_set THEN cused[ci] ELSE 0 END;

        -- FairRound over the priority's keys (FairLevel: unk after them
        -- when mixed).
        visits := 0;
        idle_from := NULL;
        turn_start := NULL;
        prev := '';
        m := 1;
        sumw := 0;
        full_keys := '{}';
        reserved := '{}';
        reserved_left := 0;
        <<round>>
        WHILE got < want AND visits < 2048 LOOP
            visits := visits + 1;
            quota := 0;
            resumed := false;
            wrapped := false;
            w := CASE WHEN cur_key = unk THEN 1 ELSE greatest(coalesce((wj ->> cur_key)::int, 1), 1) END;
            IF cur_set AND cur_used > 0 AND cur_used < w AND visits = 1 THEN
                -- The key the previous fetch stopped in the middle of: it
                -- takes the rest of its weight first.
                k := cur_key;
                quota := w - cur_used;
                resumed := true;
            ELSE
                -- walk(cur_key, NOT cur_set)
                k := NULL;
                IF NOT cur_set THEN
                    SELECT fkey INTO k FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q AND priority = prio
                    ORDER BY fkey LIMIT 1;
                ELSIF cur_key <> unk THEN
                    SELECT fkey INTO k FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q AND priority = prio AND fkey > cur_key
                    ORDER BY fkey LIMIT 1;
                END IF;
                IF k IS NULL AND mixed AND (NOT cur_set OR cur_key <> unk) THEN
                    k := unk;
                END IF;
                IF k IS NULL THEN
                    IF NOT cur_set THEN
                        EXIT round; -- no key at all
                    END IF;
                    -- Past the last key: wrap around.
                    wrapped := true;
                    SELECT fkey INTO k FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q AND priority = prio
                    ORDER BY fkey LIMIT 1;
                    IF k IS NULL AND mixed THEN
                        k := unk;
                    END IF;
                    IF k IS NULL THEN
                        cur_set := false;
                        cur_key := '';
                        cur_used := 0;
                        EXIT round;
                    END IF;
                END IF;
                cur_key := k;
                cur_used := 0;
                cur_set := true;
            END IF;
            IF idle_from IS NOT NULL AND idle_from = k THEN
                EXIT round; -- a whole turn over the keys took nothing
            END IF;
            IF turn_start IS NULL THEN
                turn_start := k;
            ELSIF (NOT wrapped AND prev < turn_start AND turn_start <= k)
                OR (wrapped AND (prev < turn_start OR turn_start <= k)) THEN
                -- A new turn.
                turn_start := k;
                IF sumw > 0 THEN
                    m := greatest(1, (want - got) / sumw);
                END IF;
                reserved := '{}';
                reserved_left := 0;
                IF m > 1 THEN
                    reserved := full_keys;
                    reserved_left := m * sumw;
                END IF;
                full_keys := '{}';
                sumw := 0;
            END IF;
            prev := k;
            w := CASE WHEN k = unk THEN 1 ELSE greatest(coalesce((wj ->> k)::int, 1), 1) END;
            IF NOT resumed THEN
                quota := w * m;
            END IF;
            IF k = ANY (reserved) THEN
                reserved := array_remove(reserved, k);
                reserved_left := reserved_left - quota;
            ELSIF reserved_left > 0 THEN
                -- A key without a reservation: what the reserved keys leave.
                quota := least(quota, greatest(0, want - got - reserved_left));
                IF quota = 0 THEN
                    cur_used := w; -- it has its turn in the next fetch
                    CONTINUE round;
                END IF;
            END IF;
            ask := least(quota, want - got);
            IF k = unk THEN
                RETURN QUERY WITH picked AS (
                    SELECT id FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q AND priority = prio AND run_at <= due_by
                    ORDER BY run_at, id LIMIT ask
                    FOR UPDATE SKIP LOCKED)
                UPDATE jobs AS u SET state = 'running', attempt = u.attempt + 1, lease = u.lease + 1, attempted_at = GREATEST(now_ts, u.run_at), lease_until = lease_to, worker = wname,
                    progress_done = NULL, progress_total = NULL, progress_at = NULL
                FROM picked WHERE u.id = picked.id
                RETURNING NULL::smallint, NULL::text, NULL::int, NULL::boolean, u;
            ELSE
                RETURN QUERY WITH picked AS (
                    SELECT id FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q AND priority = prio AND fkey = k AND run_at <= due_by
                    ORDER BY run_at, id LIMIT ask
                    FOR UPDATE SKIP LOCKED)
                UPDATE jobs AS u SET state = 'running', attempt = u.attempt + 1, lease = u.lease + 1, attempted_at = GREATEST(now_ts, u.run_at), lease_until = lease_to, worker = wname,
                    progress_done = NULL, progress_total = NULL, progress_at = NULL
                FROM picked WHERE u.id = picked.id
                RETURNING NULL::smallint, NULL::text, NULL::int, NULL::boolean, u;
            END IF;
            GET DIAGNOSTICS n = ROW_COUNT;
            got := got + n;
            IF n = 0 THEN
                IF idle_from IS NULL THEN
                    idle_from := k;
                END IF;
                cur_used := w;
            ELSIF n < ask THEN
                -- The key has no more due jobs: its turn is over.
                idle_from := NULL;
                cur_used := w;
            ELSIF ask < quota AND m = 1 THEN
                -- The fetch has what it wants in the middle of the key's
                -- weight: the next fetch gives the key the rest first.
                idle_from := NULL;
                cur_used := w - quota + n;
            ELSE
                -- A key with a backlog: it takes its share of the next turn.
                idle_from := NULL;
                cur_used := w;
                sumw := sumw + w;
                full_keys := full_keys || k;
            END IF;
        END LOOP;
        IF cur_set THEN
            RETURN QUERY SELECT prio, CASE WHEN cur_key = unk THEN NULL ELSE cur_key END, cur_used, cur_key = unk, NULL::jobs;
        ELSE
            RETURN QUERY SELECT prio, NULL::text, 0, false, NULL::jobs;
        END IF;
    END LOOP;
    IF got > 0 THEN
        INSERT INTO counters AS c (queue, name, shard, n) VALUES (q, 'attempts', cshard, got)
        ON CONFLICT (queue, name, shard) DO UPDATE SET n = c.n + excluded.n;
    END IF;
END $$;
