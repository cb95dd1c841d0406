package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

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
