package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// queryPlan returns the details of SQLite's EXPLAIN QUERY PLAN of query.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	db, err := s.readDB()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestDeleteFinishedPlanUsesIndex: retention's delete of expired finished
// jobs reads them through jobs_finished, not by scanning the jobs table
// (which holds the whole backlog).
func TestDeleteFinishedPlanUsesIndex(t *testing.T) {
	s := openTest(t)
	plan := queryPlan(t, s, deleteFinishedSQL, string(store.Completed), micros(time.Now()), 1000)
	joined := strings.Join(plan, "\n")
	for _, d := range plan {
		if strings.HasPrefix(d, "SCAN jobs") {
			t.Fatalf("delete finished scans the jobs table:\n%s", joined)
		}
	}
	if !strings.Contains(joined, "USING INDEX jobs_finished") && !strings.Contains(joined, "USING COVERING INDEX jobs_finished") {
		t.Fatalf("delete finished does not use jobs_finished:\n%s", joined)
	}
}

// TestLeasedPlanUsesIndex: a worker's running jobs are read through
// jobs_lease (a partial index of the running jobs: its whole scan is a
// read of the running jobs), not by a walk of every job in id order.
func TestLeasedPlanUsesIndex(t *testing.T) {
	s := openTest(t)
	plan := queryPlan(t, s, leasedSQL, "w", 100)
	joined := strings.Join(plan, "\n")
	for _, d := range plan {
		if strings.HasPrefix(d, "SCAN jobs") && !strings.Contains(d, "INDEX jobs_lease") {
			t.Fatalf("Leased walks the jobs table:\n%s", joined)
		}
	}
	if !strings.Contains(joined, "INDEX jobs_lease") {
		t.Fatalf("Leased does not use jobs_lease:\n%s", joined)
	}
}

// TestFairUnkeyedPlanUsesIndex: a fair fetch's take of a priority's jobs
// without a fair key is a range of jobs_ready, not a scan.
func TestFairUnkeyedPlanUsesIndex(t *testing.T) {
	s := openTest(t)
	plan := queryPlan(t, s, fairSQL["fairUnkeyed"], "q", 0, micros(time.Now()), 10)
	joined := strings.Join(plan, "\n")
	if !strings.Contains(joined, "INDEX jobs_ready (queue=? AND priority=? AND run_at<?)") {
		t.Fatalf("the take of jobs without a fair key is not a range of jobs_ready:\n%s", joined)
	}
}

// TestWorkflowPlanUsesIndexes: reading a workflow (GetWorkflow, and
// EnqueueWorkflow's answer, inside its write transaction) finds its jobs
// and their edges through indexes: a scan of job_deps per job made the
// read quadratic in the workflow's size (seconds for 3,000 jobs).
func TestWorkflowPlanUsesIndexes(t *testing.T) {
	s := openTest(t)
	for _, query := range workflowSQL {
		plan := queryPlan(t, s, query, 1)
		for _, d := range plan {
			if strings.HasPrefix(d, "SCAN") {
				t.Errorf("a workflow's read scans a table:\n%s\n%s", query, strings.Join(plan, "\n"))
			}
		}
	}
}
