package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestHotStatementsGenericPlans checks the generic plans of the
// statements a busy worker runs for each batch of jobs. The driver
// prepares them, and PostgreSQL may reuse a statement's generic plan until
// the table's statistics change (autovacuum's next analyze): made while
// the table was small, a plan with a sequential scan keeps scanning as the
// table grows. A fetch written with id = ANY(ARRAY(...)) did, and took
// 20-57 ms a call under an enqueue flood; the fetch must use the indexes
// even when planned on an empty table. Every hot statement must use them
// on a table of 10,000 jobs.
func TestHotStatementsGenericPlans(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	prepared := 0
	check := func(t *testing.T, name string) {
		t.Helper()
		sql := postgres.HotStatements(s)[name]
		prepared++
		hot := "hot" + strconv.Itoa(prepared)
		if _, err := conn.Exec(ctx, `PREPARE `+hot+` AS `+sql); err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		params := strings.TrimSuffix(strings.Repeat("NULL, ", maxParam(sql)), ", ")
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+hot+`(`+params+`)`)
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan on jobs") {
			t.Errorf("%s: the generic plan scans the jobs table:\n%s", name, text)
		}
	}
	t.Run("empty", func(t *testing.T) { check(t, "fetch") })
	t.Run("10000 jobs", func(t *testing.T) {
		jobs := make([]store.NewJob, 10000)
		for i := range jobs {
			jobs[i] = store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}
		}
		if _, err := s.Enqueue(ctx, jobs, t0); err != nil {
			t.Fatal(err)
		}
		for name := range postgres.HotStatements(s) {
			check(t, name)
		}
	})
}

// maxParam returns the highest parameter number ($n) in sql.
func maxParam(sql string) int {
	high := 0
	for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(sql, -1) {
		if n, _ := strconv.Atoi(m[1]); n > high {
			high = n
		}
	}
	return high
}

// TestFinishGenericPlanNoAntiJoin: the generic plan of the general
// Finish statement does not join the batch with itself. Its search for an
// earlier outcome of the same fence, written as a plain NOT EXISTS, was
// planned as a nested-loop anti join of the batch with itself (the
// generic plan estimates the unnest at 10 rows): 9M comparisons and 7 s
// for a batch of 3000 outcomes, tens of seconds for larger ones, with
// the batch's rows locked and heartbeats waiting. Only the outcomes that
// follow another of their fence (rare: rescues) may search now.
func TestFinishGenericPlanNoAntiJoin(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	sql := postgres.HotStatements(s)["finish"]
	if _, err := conn.Exec(ctx, `PREPARE finish_generic AS `+sql); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	params := strings.TrimSuffix(strings.Repeat("NULL, ", maxParam(sql)), ", ")
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE finish_generic(`+params+`)`)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	if text := strings.Join(plan, "\n"); strings.Contains(text, "Anti Join") {
		t.Errorf("the generic plan of finish joins the batch with itself:\n%s", text)
	}
}

// TestFetchOnePriorityNoFunction: a fetch of a queue whose waiting jobs
// all have one priority does not call job_priorities. That PL/pgSQL
// function (a call costs its executor and SPI set-up, about 0.8 million
// server instructions under callgrind) walked the queue's priorities on
// every fetch, and made a burn-down at one priority cost more per job
// than before priorities existed. With two priorities it is called, and
// the fetch still takes the higher one first.
func TestFetchOnePriorityNoFunction(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	explain := func(t *testing.T, queue string, limit int) string {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+postgres.HotStatements(s)["fetch"],
			queue, t0.Add(time.Hour), limit, t0, t0.Add(time.Minute), "w", int16(0))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(plan, "\n")
	}
	// called reports whether the plan ran the function scan.
	called := func(plan string) bool {
		for _, line := range strings.Split(plan, "\n") {
			if strings.Contains(line, "Function Scan on job_priorities") {
				return !strings.Contains(line, "never executed")
			}
		}
		return false
	}
	enqueue := func(queue string, prios ...int) {
		t.Helper()
		var jobs []store.NewJob
		for _, p := range prios {
			jobs = append(jobs, store.NewJob{Queue: queue, Kind: "k", Payload: []byte(`{}`), MaxRetries: -1, Priority: p})
		}
		if _, err := s.Enqueue(ctx, jobs, t0); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("one", 0, 0, 0)
	if plan := explain(t, "one", 10); called(plan) {
		t.Errorf("a fetch at one priority called job_priorities:\n%s", plan)
	}
	if plan := explain(t, "empty", 10); called(plan) {
		t.Errorf("a fetch of an empty queue called job_priorities:\n%s", plan)
	}
	enqueue("two", 0, 0, 5)
	if plan := explain(t, "two", 10); !called(plan) {
		t.Errorf("a fetch at two priorities did not call job_priorities:\n%s", plan)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "two", Limit: 2, Now: t0.Add(time.Hour), LeaseUntil: t0.Add(2 * time.Hour), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Priority != 5 || got[1].Priority != 0 {
		t.Fatalf("fetch of two priorities: %d jobs, want priority 5 then 0: %+v", len(got), got)
	}
}
