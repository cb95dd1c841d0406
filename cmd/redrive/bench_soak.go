package main

// `redrive bench soak`: the engine in steady state for a long run, a row
// of figures per sample interval written to CSV as it is taken.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/bench"
)

func newBenchSoakCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.SoakParams{}.WithDefaults()
	duration, sample, retryDelay := time.Duration(p.Duration), time.Duration(p.Sample), time.Duration(p.RetryDelay)
	periodic, completed, dlqAge := time.Duration(p.PeriodicEvery), time.Duration(p.CompletedRetention), time.Duration(p.DLQMaxAge)
	keys, cleanup, lateness := time.Duration(p.KeyRetention), time.Duration(p.CleanupInterval), time.Duration(p.LatenessGoal)
	var out string
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Steady work with retries, deaths, retention and a periodic job, for a long run",
		Long: `Run the engine in steady state for --duration: producers enqueue no-op jobs
at --rate jobs/s (by default --rate-fraction of the burn-down rate of
--burn-down jobs, measured first on a fresh database with the same
settings); --transient of the jobs fail transiently on their first two
attempts and succeed on the third (retried after --retry-delay, no
jitter), --dead of them fail permanently (each job's fate is a hash of its
payload); a periodic job runs every --periodic-every; retention runs every
--cleanup-interval (the engine's first cleanup is a minute after the
start) with --completed-retention and --dlq-max-age.

Every --sample it records a row: the jobs enqueued, completed, retried and
dead in the interval, completed/enqueued, the engine's retry lateness
(p50, p99), the process's RSS, the database's size, the store's backlog,
and on PostgreSQL the jobs table's pg_stat_user_tables figures (live and
dead tuples, index size, autovacuum runs, autovacuum's analyzes and the
store's own), the phase of a vacuum of it running then, and the age of
the database's oldest snapshot (the CSV's pg_oldest_xmin_age). The rows
are printed as they come and, with --out DIR, written to
DIR/soak-<store>.csv as they are taken (DIR/soak-<store>-pg-tables.csv has every table of the schema, and
DIR/soak-<store>.json the summary at the end).

At the end it judges the goals, each PASS, FAIL (with the failing rows)
or N/A: completed/enqueued >= --ratio-goal in every row after the first;
retry lateness p99 <= --lateness-goal in every row; the last third's
largest RSS and database size (and on PostgreSQL the jobs table's dead
tuples and index size) at most --plateau-margin above the middle third's.
A failed goal does not change the exit status; jobs unaccounted for do.
bench/soakplot/plot.py draws the CSV.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case duration <= 0 || sample <= 0 || sample > duration:
				return flagErrorf(cmd, "--sample (%s) must be positive and at most --duration (%s)", sample, duration)
			case p.Rate < 0:
				return flagErrorf(cmd, "--rate must not be negative, got %v", p.Rate)
			case p.Rate == 0 && (p.RateFraction <= 0 || p.RateFraction > 1):
				return flagErrorf(cmd, "--rate-fraction must be above 0 and at most 1, got %v", p.RateFraction)
			case p.Producers < 1:
				return flagErrorf(cmd, "--producers must be at least 1, got %d", p.Producers)
			case p.Batch < 1:
				return flagErrorf(cmd, "--batch must be at least 1, got %d", p.Batch)
			case p.Transient < 0 || p.Dead < 0 || p.Transient+p.Dead > 1:
				return flagErrorf(cmd, "--transient and --dead must be shares between 0 and 1 together, got %v and %v", p.Transient, p.Dead)
			case retryDelay <= 0:
				return flagErrorf(cmd, "--retry-delay must be positive, got %s", retryDelay)
			case periodic < time.Second:
				return flagErrorf(cmd, "--periodic-every must be at least 1s, got %s", periodic)
			case completed <= 0 || dlqAge <= 0 || keys <= 0 || cleanup <= 0:
				return flagErrorf(cmd, "--completed-retention, --dlq-max-age, --key-retention and --cleanup-interval must be positive")
			case p.RatioGoal <= 0 || lateness <= 0 || p.PlateauMargin <= 0:
				return flagErrorf(cmd, "--ratio-goal, --lateness-goal and --plateau-margin must be positive")
			}
			p.Duration, p.Sample, p.RetryDelay = bench.Duration(duration), bench.Duration(sample), bench.Duration(retryDelay)
			p.PeriodicEvery, p.CompletedRetention, p.DLQMaxAge = bench.Duration(periodic), bench.Duration(completed), bench.Duration(dlqAge)
			p.KeyRetention, p.CleanupInterval, p.LatenessGoal = bench.Duration(keys), bench.Duration(cleanup), bench.Duration(lateness)
			cfg, err := o.config(cmd)
			if err != nil {
				return err
			}
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
			return o.profiled(func() error { return runSoak(cmd, g, cfg, p, out) })
		},
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", duration, "length of the run")
	f.DurationVar(&sample, "sample", sample, "interval of the rows")
	f.Float64Var(&p.Rate, "rate", 0, "producers' total rate in jobs/s (0: --rate-fraction of the burn-down rate, measured first)")
	f.Float64Var(&p.RateFraction, "rate-fraction", p.RateFraction, "share of the measured burn-down rate the producers enqueue at, without --rate")
	f.IntVar(&p.BurnDown, "burn-down", p.BurnDown, "jobs of the burn-down measured first, without --rate")
	f.IntVar(&p.Producers, "producers", p.Producers, "producer goroutines")
	f.IntVar(&p.Batch, "batch", p.Batch, "jobs per EnqueueMany call")
	f.Float64Var(&p.Transient, "transient", bench.DefaultSoakTransient, "share of jobs that fail transiently twice, then succeed")
	f.Float64Var(&p.Dead, "dead", bench.DefaultSoakDead, "share of jobs that fail permanently")
	f.DurationVar(&retryDelay, "retry-delay", retryDelay, "the retries' delay (constant, no jitter)")
	f.DurationVar(&periodic, "periodic-every", periodic, "interval of the periodic job")
	f.DurationVar(&completed, "completed-retention", completed, "retention of completed jobs")
	f.DurationVar(&dlqAge, "dlq-max-age", dlqAge, "retention of dead jobs")
	f.DurationVar(&keys, "key-retention", keys, "retention of idempotency keys (the periodic job's)")
	f.DurationVar(&cleanup, "cleanup-interval", cleanup, "interval of the retention runs")
	f.Float64Var(&p.RatioGoal, "ratio-goal", p.RatioGoal, "goal: completed/enqueued in every row after the first")
	f.DurationVar(&lateness, "lateness-goal", lateness, "goal: retry lateness p99 in every row")
	f.Float64Var(&p.PlateauMargin, "plateau-margin", p.PlateauMargin, "goal: the last third's max RSS and database size at most this share above the middle third's")
	f.StringVar(&out, "out", "", "directory for the CSV files and the JSON summary (default: none written)")
	return cmd
}

// runSoak runs the workload, printing each row as it comes (to standard
// error with --json, whose standard output is the result) and appending
// it to the CSV, then prints the result and writes the summary.
func runSoak(cmd *cobra.Command, g *globalOptions, cfg bench.Config, p bench.SoakParams, out string) error {
	store := "sqlite"
	if cfg.DatabaseURL != "" {
		store = "postgres"
	}
	var rowsCSV, tablesCSV *csvFile
	if out != "" {
		var err error
		if rowsCSV, err = createCSV(filepath.Join(out, "soak-"+store+".csv"), bench.SoakCSVHeader); err != nil {
			return err
		}
		defer rowsCSV.close()
		if store == "postgres" {
			if tablesCSV, err = createCSV(filepath.Join(out, "soak-"+store+"-pg-tables.csv"), bench.PGTablesCSVHeader); err != nil {
				return err
			}
			defer tablesCSV.close()
		}
	}
	table := cmd.OutOrStdout()
	if g.JSON {
		table = cmd.ErrOrStderr()
	}
	header := true
	var csvErr error
	res, err := bench.Soak(cmd.Context(), cfg, p, func(s bench.SoakSample) {
		if header {
			printSoakHeader(table, s.PG != nil)
			header = false
		}
		printSoakRow(table, s)
		if rowsCSV != nil && csvErr == nil {
			csvErr = rowsCSV.write(s.CSV())
		}
		for _, t := range s.Tables {
			if tablesCSV != nil && csvErr == nil {
				csvErr = tablesCSV.write(t.CSV())
			}
		}
	})
	if csvErr != nil {
		err = errors.Join(err, fmt.Errorf("--out: %w", csvErr))
	}
	if res == nil {
		return err
	}
	if out != "" {
		if werr := writeSoakSummary(filepath.Join(out, "soak-"+store+".json"), res); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	w := cmd.OutOrStdout()
	if g.JSON {
		if werr := writeJSON(w, res); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	fmt.Fprintln(w)
	if perr := printResult(w, res); perr != nil {
		return errors.Join(err, perr)
	}
	return err
}

// csvFile is a CSV file written a record at a time, each flushed at
// once, so that a long run's rows are on disk however it ends.
type csvFile struct {
	f *os.File
	w *csv.Writer
}

// createCSV creates the file at path and writes the header.
func createCSV(path string, header []string) (*csvFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	c := &csvFile{f: f, w: csv.NewWriter(f)}
	if err := c.write(header); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func (c *csvFile) write(rec []string) error {
	c.w.Write(rec)
	c.w.Flush()
	if err := c.w.Error(); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

func (c *csvFile) close() { c.f.Close() }

// writeSoakSummary writes the result as JSON to path.
func writeSoakSummary(path string, res *bench.SoakResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	werr := writeJSON(f, res)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("--out: %w", werr)
	}
	return nil
}

func printSoakHeader(w io.Writer, pg bool) {
	fmt.Fprintf(w, "%8s %8s %8s %6s %6s %5s %4s %8s %8s %8s %7s %8s %8s", "t", "enq/s", "done/s", "ratio", "retry", "dead", "tick",
		"late p50", "late p99", "pickup99", "RSS MiB", "DB MiB", "backlog")
	if pg {
		fmt.Fprintf(w, " %9s %9s %8s %4s %4s %4s  %s", "jobs live", "jobs dead", "idx MiB", "av", "aan", "an", "vacuum")
	}
	fmt.Fprintln(w)
}

func printSoakRow(w io.Writer, s bench.SoakSample) {
	sec := time.Duration(s.Interval).Seconds()
	late := func(d bench.Duration) string {
		if s.RetryLateness.N == 0 {
			return "-"
		}
		return d.String()
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "%8s %8.0f %8.0f %6.3f %6d %5d %4d %8s %8s %8s %7s %8s %8d", time.Duration(s.At).Round(time.Second),
		float64(s.Enqueued)/sec, float64(s.Completed)/sec, s.Ratio, s.Retried, s.Dead, s.Periodic,
		late(s.RetryLateness.P50), late(s.RetryLateness.P99), s.Pickup.P99.String(), mib(s.RSS), mib(s.DBBytes), s.Backlog)
	if s.PG != nil {
		fmt.Fprintf(w, " %9d %9d %8s %4d %4d %4d  %s", s.PG.Live, s.PG.DeadTuples, mib(s.PG.IndexBytes), s.PG.Autovacuum,
			s.PG.Autoanalyze, s.PG.Analyze, s.PG.VacuumPhase)
	}
	fmt.Fprintln(w)
}
