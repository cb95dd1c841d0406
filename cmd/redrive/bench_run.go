package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
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
	var payloads store.PayloadCodec
	if o.encrypt {
		key := make([]byte, seal.KeySize)
		if _, err := rand.Read(key); err != nil {
			return bench.Config{}, err
		}
		keys, err := seal.NewKeyring("bench", map[string][]byte{"bench": key})
		if err != nil {
			return bench.Config{}, err
		}
		payloads = &seal.Policy{Keys: keys, All: true}
	}
	return bench.Config{Workers: o.workers, FetchBatch: o.fetchBatch, Synchronous: sync, RetryBudget: o.retryBudget, Payloads: payloads,
		DBDir: o.dbDir, Keep: o.keep, ErrorLog: cmd.ErrOrStderr(), StallTimeout: o.stallTimeout,
		InsertBatch: o.insertBatch, DatabaseURL: o.databaseURL, Processes: o.processes, Record: o.record, Spawn: spawnWorker,
		Limited: o.limited, LimitKeys: o.limitKeys}, nil
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
	return o.profiled(func() error { return runWorkloads(cmd, g, cfg, out, workloads) })
}

// profiled runs fn under a CPU profile (--cpuprofile) and then writes an
// allocation profile (--memprofile), when asked. The workload's error
// comes first; a profile that cannot be written is an error too.
func (o *benchOptions) profiled(fn func() error) (err error) {
	if o.memProfile != "" {
		// One sample per 4 KiB allocated, not per 512 KiB: the
		// per-record costs of a consumer are small allocations.
		runtime.MemProfileRate = 4096
	}
	if o.cpuProfile != "" {
		f, cerr := os.Create(o.cpuProfile)
		if cerr != nil {
			return fmt.Errorf("--cpuprofile: %w", cerr)
		}
		defer f.Close()
		if cerr := pprof.StartCPUProfile(f); cerr != nil {
			return fmt.Errorf("--cpuprofile: %w", cerr)
		}
		defer pprof.StopCPUProfile()
	}
	err = fn()
	if o.memProfile != "" {
		if merr := writeHeapProfile(o.memProfile); merr != nil {
			err = errors.Join(err, merr)
		}
	}
	return err
}

// writeHeapProfile writes the allocations made so far to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	runtime.GC() // the profile's figures are as of the last GC
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}

// runWorkloads runs the workloads of run in turn, printing each result.
func runWorkloads(cmd *cobra.Command, g *globalOptions, cfg bench.Config, out io.Writer, workloads []workload) error {
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
