package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/spf13/cobra"
)

// config validates the shared flags and returns the workloads' Config.
func (o *benchOptions) config(cmd *cobra.Command) (bench.Config, error) {
	sync := strings.ToLower(o.synchronous)
	switch {
	case o.workers < 1:
		return bench.Config{}, flagErrorf(cmd, "--workers must be at least 1, got %d", o.workers)
	case o.fetchBatch < 0:
		return bench.Config{}, flagErrorf(cmd, "--fetch-batch must not be negative, got %d", o.fetchBatch)
	case sync != "full" && sync != "normal":
		return bench.Config{}, flagErrorf(cmd, "--synchronous must be full or normal, got %q", o.synchronous)
	case o.stallTimeout <= 0:
		return bench.Config{}, flagErrorf(cmd, "--stall-timeout must be positive, got %s", o.stallTimeout)
	case o.insertBatch < 0 || o.insertBatch > redrive.MaxBatch:
		return bench.Config{}, flagErrorf(cmd, "--insert-batch must be between 1 and %d, got %d", redrive.MaxBatch, o.insertBatch)
	case o.processes < 0:
		return bench.Config{}, flagErrorf(cmd, "--processes must not be negative, got %d", o.processes)
	case o.processes > 0 && o.databaseURL == "":
		return bench.Config{}, flagErrorf(cmd, "--processes needs --database-url: worker processes share a PostgreSQL database")
	case o.processes > 0 && o.record:
		return bench.Config{}, flagErrorf(cmd, "--record runs the workers in this process: leave out --processes")
	}
	if o.dbDir != "" {
		if fi, err := os.Stat(o.dbDir); err != nil || !fi.IsDir() {
			return bench.Config{}, flagErrorf(cmd, "--db-dir %q is not a directory", o.dbDir)
		}
	}
	return bench.Config{Workers: o.workers, FetchBatch: o.fetchBatch, Synchronous: sync, RetryBudget: o.retryBudget,
		DBDir: o.dbDir, Keep: o.keep, ErrorLog: cmd.ErrOrStderr(), StallTimeout: o.stallTimeout,
		InsertBatch: o.insertBatch, DatabaseURL: o.databaseURL, Processes: o.processes, Record: o.record, Spawn: spawnWorker}, nil
}

// run runs the workloads one after the other, printing each result as it
// comes, under a CPU profile when asked. A failed consistency check is
// reported and the next workload still runs; any other error stops.
func (o *benchOptions) run(cmd *cobra.Command, g *globalOptions, workloads ...workload) error {
	cfg, err := o.config(cmd)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var failed []error
	for i, w := range workloads {
		res, err := w(cmd.Context(), cfg)
		if res != nil {
			if g.JSON {
				if werr := writeJSON(out, res); werr != nil {
					return werr
				}
			} else {
				if i > 0 {
					fmt.Fprintln(out)
				}
				if werr := printResult(out, res); werr != nil {
					return werr
				}
			}
		}
		if err != nil {
			if !errors.Is(err, bench.ErrCheck) {
				return err
			}
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// printResult writes a result for people: the workload and environment,
// the parameters, the figures and what became of the database.
func printResult(w io.Writer, r bench.Result) error {
	m := r.Info()
	fmt.Fprintf(w, "%s  (%s)\n", m.Workload, m.Env)
	fmt.Fprintln(w, "parameters:")
	if err := writeFields(w, "  ", toFields(r.Parameters())); err != nil {
		return err
	}
	fmt.Fprintln(w, "results:")
	if err := writeFields(w, "  ", toFields(r.Figures())); err != nil {
		return err
	}
	if m.DBBytes == 0 && m.DBPath == "" && m.Schema == "" {
		_, err := fmt.Fprintf(w, "elapsed %s\n", m.Elapsed)
		return err
	}
	db := "deleted"
	switch {
	case m.Schema != "" && m.SchemaKept:
		db = "kept in PostgreSQL schema " + m.Schema
	case m.Schema != "":
		db = "schema " + m.Schema + " dropped"
	case m.DBPath != "":
		db = "kept at " + m.DBPath
	}
	_, err := fmt.Fprintf(w, "elapsed %s; database %.1f MiB, %s\n", m.Elapsed, float64(m.DBBytes)/(1<<20), db)
	return err
}

func toFields(fs []bench.Figure) []field {
	out := make([]field, len(fs))
	for i, f := range fs {
		out[i] = field{f.Name, f.Value}
	}
	return out
}
