package main

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/bench"
)

// benchOptions are the flags shared by every `redrive bench` workload.
type benchOptions struct {
	workers      int
	fetchBatch   int
	encrypt      bool
	synchronous  string
	retryBudget  bool
	dbDir        string
	keep         bool
	cpuProfile   string
	memProfile   string
	stallTimeout time.Duration
	databaseURL  string
	// insertBatch is set by the throughput command's --insert-batch.
	insertBatch int
	// record is set by the throughput command's --record.
	record bool
	// limited and limitKeys are set by the throughput command's
	// --limited and --limit-keys.
	limited, limitKeys int
	// processes is set by the throughput and lateness commands' own
	// --processes flag.
	processes int
}

// workload runs one bench workload.
type workload func(ctx context.Context, cfg bench.Config) (bench.Result, error)

// result turns a workload's typed result into a bench.Result, keeping a
// nil pointer nil.
func result[R any, P interface {
	*R
	bench.Result
}](r P, err error) (bench.Result, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// newBenchCmd is `redrive bench`: the workloads of package bench.
func newBenchCmd(g *globalOptions) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the engine's throughput, failure handling and timing",
		Long: `Measure the engine. Each workload opens a fresh SQLite database (in a
temporary directory unless --db-dir is given, deleted afterwards unless
--keep), runs the real client and worker on it and prints what it measured,
with the parameters, the Go version and GOMAXPROCS. The global --db is not
used: a benchmark never touches your database.

With --database-url, the workload runs on PostgreSQL instead, in a fresh
schema redrive_bench_<random> of that database (dropped afterwards unless
--keep). The throughput and lateness workloads then accept --processes N:
the workers run in N separate redrive processes and this one only enqueues
and collects, so that retries cross processes (woken by LISTEN/NOTIFY).
REDRIVE_DATABASE_URL is not read here: a benchmark runs on PostgreSQL only
when asked on its command line.

Workloads:
  throughput  pre-insert N no-op jobs, then time their burn-down
  continuous  producers enqueue while the worker burns down, for a duration
  failure     N jobs fail twice, then succeed (1ms retries): engine overhead
  lateness    N jobs fail once and retry after 1s: how late the retry starts
  depth       burn-down of 50k due jobs behind a deep backlog of waiting ones
  dlq         listings, groups, counts and a redrive of a deep DLQ
  rate        a fleet-wide rate limit shared by worker processes: rate held, worst window
  soak        steady work with retries, deaths, retention and a periodic job, a row per minute
  download    16 generated 256 MiB files through the download kind, then curl
  all         throughput, failure and lateness with their defaults`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&o.workers, "workers", bench.DefaultWorkers, "worker concurrency")
	pf.IntVar(&o.fetchBatch, "fetch-batch", 0, "jobs leased per fetch (0: the engine's default)")
	pf.BoolVar(&o.encrypt, "encrypt", false, "encrypt every payload at rest (AES-256-GCM, a random key for the run)")
	pf.StringVar(&o.synchronous, "synchronous", "full", "SQLite synchronous setting: full or normal")
	pf.BoolVar(&o.retryBudget, "retry-budget", false, "keep the engine's retry budget on (off: it would throttle the failure workloads)")
	pf.StringVar(&o.dbDir, "db-dir", "", "directory for the fresh database (default: a temporary directory)")
	pf.BoolVar(&o.keep, "keep", false, "keep the database afterwards and print its path")
	pf.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the workload to this file")
	pf.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the workload to this file")
	pf.DurationVar(&o.stallTimeout, "stall-timeout", bench.DefaultStallTimeout, "abort when no job progresses for this long")
	_ = pf.MarkHidden("stall-timeout")
	pf.StringVar(&o.databaseURL, "database-url", "", "run on this PostgreSQL database, in a fresh schema (default: SQLite)")

	cmd.AddCommand(
		newBenchThroughputCmd(g, o),
		newBenchContinuousCmd(g, o),
		newBenchFailureCmd(g, o),
		newBenchLatenessCmd(g, o),
		newBenchDepthCmd(g, o),
		newBenchPriorityCmd(g, o),
		newBenchFairCmd(g, o),
		newBenchDLQCmd(g, o),
		newBenchRateCmd(g, o),
		newBenchSoakCmd(g, o),
		newBenchAllCmd(g, o),
		newBenchWorkerCmd(o),
		newBenchAMQPCmd(g),
		newBenchKafkaCmd(g, o),
		newBenchDownloadCmd(g, o),
		newBenchFileServerCmd(),
	)
	return cmd
}

// addProcessesFlag adds --processes to a workload that can run its
// workers in separate processes.
func addProcessesFlag(cmd *cobra.Command, o *benchOptions) {
	cmd.Flags().IntVar(&o.processes, "processes", 0,
		"run the workers in N separate processes (--workers each; needs --database-url; 0: in this process)")
}

// newBenchWorkerCmd is the hidden `redrive bench worker`: one worker
// process of a multi-process workload, started by the benchmark itself
// (re-executing this binary) and driven through its standard input and
// output.
func newBenchWorkerCmd(o *benchOptions) *cobra.Command {
	var p bench.WorkerProcess
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "One worker process of a multi-process benchmark (started by the benchmark)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.DatabaseURL, p.Workers, p.FetchBatch, p.RetryBudget = o.databaseURL, o.workers, o.fetchBatch, o.retryBudget
			switch {
			case p.SQLitePath == "" && (p.DatabaseURL == "" || p.Schema == ""):
				return flagErrorf(cmd, "--database-url and --schema, or --sqlite-path, are required")
			case p.Workers < 1:
				return flagErrorf(cmd, "--workers must be at least 1, got %d", p.Workers)
			}
			return bench.ServeWorker(cmd.Context(), p, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Schema, "schema", "", "the benchmark's schema")
	f.StringVar(&p.Mode, "mode", bench.ModeThroughput, "throughput, lateness or rate")
	f.StringVar(&p.SQLitePath, "sqlite-path", "", "the benchmark's SQLite database (instead of --database-url and --schema)")
	f.DurationVar(&p.RetryDelay, "retry-delay", bench.DefaultRetryDelay, "the lateness workload's retry delay")
	return cmd
}

// workerEnv is set in the environment of the worker processes a
// benchmark starts, so that a test binary standing in for redrive knows to
// behave as the CLI (see TestMain).
const workerEnv = "REDRIVE_BENCH_WORKER"

// spawnWorker starts this very binary as `redrive bench worker`.
func spawnWorker(ctx context.Context, args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"bench", "worker"}, args...)...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	return cmd, nil
}

func newBenchAllCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "all",
		Short: "Run throughput, failure and lateness with their defaults",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, g,
				func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
					return result(bench.Throughput(ctx, cfg, bench.DefaultThroughputN))
				},
				func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
					return result(bench.Failure(ctx, cfg, bench.DefaultFailureN))
				},
				func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
					return result(bench.Lateness(ctx, cfg, bench.DefaultLatenessN, bench.DefaultRetryDelay, bench.DefaultInterval))
				},
			)
		},
	}
}
