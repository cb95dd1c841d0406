package postgres_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestMigratePlainRowCost: migration 0031 (the limit and fair indexes'
// predicates reordered, jobs_limit_gen's WHEN on the new row only, the
// CHECKs folded, ckey null without a limit) applies to a schema at
// version 30 that holds jobs in every state, plain, limited, fair and
// both: every job reads back the same, the limits' use is the same, and
// afterwards the limits hold, a freed slot is taken, the fair and plain
// fetches find their jobs and the limit count moves only for limited
// jobs.
func TestMigratePlainRowCost(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	restore := postgres.MigrateThrough(30)
	defer restore() // a failure below must not leave the package's other tests at version 30
	s := open(t, schema)
	defer func() { s.Close() }()
	now := t0
	lease := func(queue string, n int) []*store.Job {
		t.Helper()
		got, err := s.Fetch(ctx, store.FetchParams{Queue: queue, Limit: n, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil {
			t.Fatalf("Fetch %s: %v", queue, err)
		}
		return got
	}
	// finish ends a leased job's attempt in the schema at version 30 by
	// hand: the store's Finish of today writes columns later migrations
	// add (0032's result). Only the job's state and times matter here.
	finish := func(kind store.OutcomeKind, j *store.Job) {
		t.Helper()
		set := map[store.OutcomeKind]string{
			store.Complete: `state = 'completed', finished_at = $2`,
			store.Bury:     `state = 'dead', finished_at = $2, last_error = 'boom'`,
			store.Retry:    `state = 'scheduled', run_at = $2::timestamptz + interval '1 hour', last_error = 'boom'`,
		}[kind]
		if _, err := s.Pool().Exec(ctx, `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.jobs SET `+set+
			`, lease_until = NULL, worker = NULL WHERE id = $1 AND state = 'running'`, j.ID, now); err != nil {
			t.Fatalf("finish of job %d: %v", j.ID, err)
		}
	}

	lim := func(key string) store.NewJob {
		return store.NewJob{Queue: "l", Kind: "k", Limit: "lim", LimitKey: key, LimitMax: 1}
	}
	jobs := []store.NewJob{
		{Queue: "p", Kind: "k", Priority: 5}, {Queue: "p", Kind: "k"}, {Queue: "p", Kind: "k", Priority: -3},
		{Queue: "p", Kind: "k"}, {Queue: "p", Kind: "k"}, {Queue: "p", Kind: "k", Priority: -3},
		{Queue: "p", Kind: "k", RunAt: now.Add(time.Hour)},
		lim("a"), lim("a"), lim("a"), lim("b"),
		{Queue: "f", Kind: "k", Fair: true, FairKey: "t1"}, {Queue: "f", Kind: "k", Fair: true, FairKey: "t1", Priority: 2},
		{Queue: "f", Kind: "k", Fair: true, FairKey: "t2"}, {Queue: "f", Kind: "k", Fair: true, FairKey: "t2"},
		{Queue: "f", Kind: "k", Fair: true, FairKey: "t3", Limit: "lim", LimitKey: "c", LimitMax: 1},
	}
	enq, err := s.Enqueue(ctx, jobs, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddDead(ctx, []store.DeadJob{{Queue: "p", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1, DeadAt: now,
		DeadReason: "r", LastError: "boom", Fingerprint: "fp"}}, now); err != nil {
		t.Fatal(err)
	}
	if got := lease("l", 10); len(got) != 2 {
		t.Fatalf("limited fetch before the migration: %d jobs, want 2 (groups a and b, one slot each)", len(got))
	}
	plain := lease("p", 4) // priority 5, then the three at 0
	if len(plain) != 4 {
		t.Fatalf("plain fetch: %d jobs, want 4", len(plain))
	}
	finish(store.Complete, plain[0])
	finish(store.Bury, plain[1])
	finish(store.Retry, plain[2]) // scheduled again, an hour on
	if got := lease("f", 1); len(got) != 1 {
		t.Fatalf("fair fetch: %d jobs, want 1", len(got))
	}
	if _, err := s.Cancel(ctx, enq[2].ID, now); err != nil { // a pending job at -3
		t.Fatal(err)
	}

	type snapshot struct {
		jobs   map[int64]*store.Job
		jl     map[int64]store.JobLimit
		limits []store.LimitState
		groups []store.LimitGroup
	}
	read := func() snapshot {
		t.Helper()
		sn := snapshot{jobs: map[int64]*store.Job{}, jl: map[int64]store.JobLimit{}}
		for id := int64(1); id <= int64(len(jobs)+1); id++ {
			j, err := s.Get(ctx, id)
			if err != nil {
				t.Fatalf("Get %d: %v", id, err)
			}
			sn.jobs[id] = j
			if l, ok, err := s.JobLimit(ctx, id); err != nil {
				t.Fatalf("JobLimit %d: %v", id, err)
			} else if ok {
				sn.jl[id] = l
			}
		}
		if sn.limits, err = s.ListLimits(ctx, now); err != nil {
			t.Fatal(err)
		}
		if sn.groups, err = s.LimitGroups(ctx, "lim", 10); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	// Today's Get reads the result column 0032 adds: at version 30 the
	// schema lends it one for the read, dropped before the migration.
	jobsTable := pgx.Identifier{schema}.Sanitize() + `.jobs`
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+jobsTable+` ADD COLUMN result bytea`); err != nil {
		t.Fatal(err)
	}
	before := read()
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+jobsTable+` DROP COLUMN result`); err != nil {
		t.Fatal(err)
	}
	states := map[store.State]int{}
	for _, j := range before.jobs {
		states[j.State]++
	}
	for _, st := range []store.State{store.Pending, store.Scheduled, store.Running, store.Completed, store.Dead, store.Canceled} {
		if states[st] == 0 {
			t.Fatalf("no job %s before the migration: %v", st, states)
		}
	}

	s.Close()
	restore()
	s = open(t, schema)
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{schema}.Sanitize()
	var applied bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+id+`.redrive_migrations WHERE version = 31)`).Scan(&applied); err != nil || !applied {
		t.Fatalf("migration 31 applied: %v, %v", applied, err)
	}
	after := read()
	for jid, b := range before.jobs {
		if a := after.jobs[jid]; !reflect.DeepEqual(a, b) {
			t.Errorf("job %d after the migration:\n%+v\nwant\n%+v", jid, a, b)
		}
	}
	if !reflect.DeepEqual(after.jl, before.jl) {
		t.Errorf("the jobs' limits after the migration: %+v; want %+v", after.jl, before.jl)
	}
	if !reflect.DeepEqual(after.limits, before.limits) || !reflect.DeepEqual(after.groups, before.groups) {
		t.Errorf("limits after the migration: %+v %+v; want %+v %+v", after.limits, after.groups, before.limits, before.groups)
	}
	for _, ix := range []string{"jobs_limit_due", "jobs_limit_running", "jobs_limit_group_due", "jobs_fair_due", "jobs_fair_first"} {
		var def string
		if err := conn.QueryRow(ctx, `SELECT pg_get_indexdef(($1 || '.' || $2)::regclass)`, id, ix).Scan(&def); err != nil {
			t.Fatal(err)
		}
		pred := def[strings.Index(def, "WHERE"):]
		if !strings.HasPrefix(pred, "WHERE ((climit IS NOT NULL)") && !strings.HasPrefix(pred, "WHERE ((fkey IS NOT NULL)") {
			t.Errorf("%s's predicate does not test climit or fkey first: %s", ix, def)
		}
	}

	gen := func() int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, `SELECT n FROM `+id+`.limit_gen`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Both groups of "l" are full: nothing starts.
	if got := lease("l", 10); len(got) != 0 {
		t.Fatalf("limited fetch with both groups full: %d jobs", len(got))
	}
	// A plain job's completion does not move the limit count; a limited
	// job's does, and frees its group's slot for the next.
	g := gen()
	finish(store.Complete, plain[3])
	if gen() != g {
		t.Errorf("limit_gen moved on a plain job's completion")
	}
	var running *store.Job
	for _, j := range after.jobs {
		if j.Queue == "l" && j.State == store.Running && after.jl[j.ID].Key == "a" {
			running = j
		}
	}
	if running == nil {
		t.Fatal("no running job of group a")
	}
	finish(store.Complete, running)
	if gen() != g+1 {
		t.Errorf("limit_gen = %d after a limited job's completion, want %d", gen(), g+1)
	}
	if got := lease("l", 10); len(got) != 1 || got[0].ID != enq[8].ID {
		t.Fatalf("limited fetch after group a's slot was freed: %d jobs, want 1: job %d of group a", len(got), enq[8].ID)
	}
	if got := lease("f", 10); len(got) != 4 {
		t.Fatalf("fair fetch after the migration: %d jobs, want 4 (three fair, one fair and limited)", len(got))
	}
	if got := lease("p", 10); len(got) != 1 || got[0].ID != enq[5].ID {
		t.Fatalf("plain fetch after the migration: %d jobs, want job %d", len(got), enq[5].ID)
	}

	// Jobs enqueued now: without a limit the group key is null, under one
	// it is the key.
	fresh, err := s.Enqueue(ctx, []store.NewJob{{Queue: "p", Kind: "k"}, lim("d")}, now)
	if err != nil {
		t.Fatal(err)
	}
	var plainKey, limKey *string
	if err := conn.QueryRow(ctx, `SELECT (SELECT ckey FROM `+id+`.jobs WHERE id = $1), (SELECT ckey FROM `+id+`.jobs WHERE id = $2)`,
		fresh[0].ID, fresh[1].ID).Scan(&plainKey, &limKey); err != nil {
		t.Fatal(err)
	}
	if plainKey != nil || limKey == nil || *limKey != "d" {
		t.Errorf("group keys of new jobs: %v, %v; want null and d", plainKey, limKey)
	}
}
