package main

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/bench"
)

// TestBenchSoak runs the soak for a few seconds on SQLite with a short
// row interval and checks what it wrote: the CSV's header and one row per
// interval, matching the JSON summary, with plausible values. Nothing is
// asserted about the machine's speed (the goals may pass or fail).
func TestBenchSoak(t *testing.T) {
	testBenchSoak(t, "sqlite")
}

// TestBenchSoakPostgres is TestBenchSoak on PostgreSQL: the rows also
// carry the jobs table's pg_stat_user_tables figures, and the tables' CSV
// is written.
func TestBenchSoakPostgres(t *testing.T) {
	testBenchSoak(t, "postgres", "--database-url", pgURL(t))
}

func testBenchSoak(t *testing.T, store string, extra ...string) {
	out := t.TempDir()
	args := append([]string{"soak", "--duration", "3s", "--sample", "1s", "--rate", "400", "--retry-delay", "100ms",
		"--transient", "0.2", "--dead", "0.05", "--workers", "20", "--out", out}, extra...)
	res := benchJSON[bench.SoakResult](t, args...)
	checkMeta(t, res.Meta, "soak")
	p := res.Params
	if p.Rate != 400 || p.Sample != bench.Duration(time.Second) || p.Transient != 0.2 || p.Dead != 0.05 || p.Store != store ||
		p.BurnDown != bench.DefaultBurnDown || p.CompletedRetention != bench.Duration(bench.DefaultSoakCompleted) {
		t.Errorf("params = %+v", p)
	}
	if res.BurnDownRate != 0 {
		t.Errorf("burn-down measured (%v) although --rate was given", res.BurnDownRate)
	}
	// The producers' first batches are enqueued at the start and always
	// finish; every job is accounted for (the command checks it too).
	if res.Enqueued < 1 || res.Completed+res.Dead+res.Backlog != res.Enqueued || res.StoreSucceeded != res.Completed ||
		res.StoreRetried != res.Retried || res.StoreDead != res.Dead {
		t.Errorf("totals: %d enqueued, %d completed, %d dead, backlog %d, store succeeded %d retried %d (observed %d)",
			res.Enqueued, res.Completed, res.Dead, res.Backlog, res.StoreSucceeded, res.StoreRetried, res.Retried)
	}
	// Three rows: one per second, the last at the end.
	if len(res.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(res.Rows))
	}
	var sum bench.SoakSample
	for i, r := range res.Rows {
		if r.Interval <= 0 || (i > 0 && r.At <= res.Rows[i-1].At) || r.RSS <= 1<<20 || r.RSSMax < 1<<20 || r.GoHeap <= 0 || r.DBBytes <= 0 ||
			r.Backlog < 0 || r.StoredCompleted < 0 || r.StoredDead < 0 {
			t.Errorf("row %d implausible: %+v", i, r)
		}
		if (store == "postgres") != (r.PG != nil) {
			t.Errorf("row %d: PostgreSQL figures %+v on %s", i, r.PG, store)
		}
		if r.PG != nil && (r.PG.TablesSampled < 5 || r.PG.TableBytes <= 0 || r.PG.IndexBytes <= 0 || r.PG.IndexBytesAll < r.PG.IndexBytes) {
			t.Errorf("row %d: PostgreSQL figures %+v", i, r.PG)
		}
		if r.Enqueued > 0 && math.Abs(r.Ratio-float64(r.Completed)/float64(r.Enqueued)) > 1e-9 {
			t.Errorf("row %d: ratio %v is not %d/%d", i, r.Ratio, r.Completed, r.Enqueued)
		}
		if r.RetryLateness.N > 0 && (r.RetryLateness.P50 < 0 || r.RetryLateness.P99 < r.RetryLateness.P50) {
			t.Errorf("row %d: retry lateness %+v", i, r.RetryLateness)
		}
		sum.Enqueued += r.Enqueued
		sum.Completed += r.Completed
		sum.Retried += r.Retried
		sum.Dead += r.Dead
		sum.Handled += r.Handled
	}
	if sum.Enqueued > res.Enqueued || sum.Completed > res.Completed || sum.Retried > res.Retried || sum.Dead > res.Dead ||
		sum.Handled > res.Completed {
		t.Errorf("rows add up to more than the totals: %+v vs %+v", sum, res)
	}
	wantGoals := []string{"completed/enqueued", "retry lateness", "RSS plateau", "database size plateau"}
	if store == "postgres" {
		wantGoals = append(wantGoals, "jobs dead tuples plateau", "jobs index size plateau")
	}
	if len(res.Goals) != len(wantGoals) {
		t.Fatalf("goals %+v, want %v", res.Goals, wantGoals)
	}
	for i, g := range res.Goals {
		if !strings.HasPrefix(g.Name, wantGoals[i]) || !slices.Contains([]string{"PASS", "FAIL", "N/A"}, g.Status) || g.Detail == "" {
			t.Errorf("goal %d = %+v, want %q", i, g, wantGoals[i])
		}
	}

	// The CSV has the header and the same rows.
	recs := readCSV(t, filepath.Join(out, "soak-"+store+".csv"))
	if !slices.Equal(recs[0], bench.SoakCSVHeader) {
		t.Fatalf("CSV header %v", recs[0])
	}
	if len(recs) != 1+len(res.Rows) {
		t.Fatalf("CSV has %d rows, want %d", len(recs)-1, len(res.Rows))
	}
	col := func(name string) int { return slices.Index(bench.SoakCSVHeader, name) }
	for i, r := range res.Rows {
		rec := recs[i+1]
		if len(rec) != len(bench.SoakCSVHeader) || !slices.Equal(rec, r.CSV()) {
			t.Errorf("CSV row %d = %v, want %v", i, rec, r.CSV())
			continue
		}
		for _, c := range []string{"enqueued", "completed", "retried", "dead", "rss_bytes", "db_bytes"} {
			if _, err := strconv.ParseInt(rec[col(c)], 10, 64); err != nil {
				t.Errorf("CSV row %d: %s = %q", i, c, rec[col(c)])
			}
		}
		if pg := rec[col("pg_jobs_index_bytes")]; (store == "postgres") != (pg != "") {
			t.Errorf("CSV row %d: pg_jobs_index_bytes = %q on %s", i, pg, store)
		}
		if store == "postgres" {
			for _, c := range []string{"pg_jobs_analyze", "pg_jobs_autoanalyze", "pg_oldest_xmin_age"} {
				if n, err := strconv.ParseInt(rec[col(c)], 10, 64); err != nil || n < 0 {
					t.Errorf("CSV row %d: %s = %q", i, c, rec[col(c)])
				}
			}
		}
	}

	// The summary is the result; on PostgreSQL, the tables' CSV has the
	// jobs table in every row.
	var sumJSON bench.SoakResult
	if b, err := os.ReadFile(filepath.Join(out, "soak-"+store+".json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &sumJSON); err != nil || len(sumJSON.Rows) != len(res.Rows) || sumJSON.Enqueued != res.Enqueued {
		t.Errorf("summary: %v, %d rows, %d enqueued", err, len(sumJSON.Rows), sumJSON.Enqueued)
	}
	tablesCSV := filepath.Join(out, "soak-"+store+"-pg-tables.csv")
	if store != "postgres" {
		if _, err := os.Stat(tablesCSV); err == nil {
			t.Errorf("%s written on SQLite", tablesCSV)
		}
		return
	}
	tables := readCSV(t, tablesCSV)
	if !slices.Equal(tables[0], bench.PGTablesCSVHeader) {
		t.Fatalf("tables CSV header %v", tables[0])
	}
	jobsRows := 0
	for _, rec := range tables[1:] {
		if rec[1] == "jobs" {
			jobsRows++
		}
	}
	if jobsRows != len(res.Rows) {
		t.Errorf("tables CSV has %d rows of the jobs table, want %d", jobsRows, len(res.Rows))
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v, %d records", path, err, len(recs))
	}
	return recs
}
