package main

// The workloads of `redrive bench`, one command each; bench.go has the
// command itself, its shared flags and the worker processes.

import (
	"context"
	"slices"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/spf13/cobra"
)

func newBenchThroughputCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	var n, rounds int
	var tracing []string
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Pre-insert N no-op jobs, then time their burn-down",
		Long: `Pre-insert N no-op jobs with EnqueueMany in batches of --insert-batch (the
insert rate is reported), then start a worker and time until the N-th
handler call (and until its shutdown has written every outcome). The store must count N
completed jobs at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return flagErrorf(cmd, "-n must be at least 1, got %d", n)
			}
			modes, err := tracingModes(tracing)
			if err != nil {
				return flagErrorf(cmd, "%v", err)
			}
			if rounds < 1 {
				return flagErrorf(cmd, "--rounds must be at least 1, got %d", rounds)
			}
			if o.processes > 0 && !slices.Equal(modes, []string{"off"}) {
				return flagErrorf(cmd, "--tracing traces the workers of this process: leave out --processes")
			}
			if len(modes) == 1 && modes[0] == "off" && rounds == 1 {
				return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
					return result(bench.Throughput(ctx, cfg, n))
				})
			}
			ws, runs := tracingWorkloads(n, modes, rounds)
			err = o.run(cmd, g, ws...)
			if !g.JSON {
				printTracingSummary(cmd.OutOrStdout(), modes, *runs)
			}
			return err
		},
	}
	cmd.Flags().IntVarP(&n, "jobs", "n", bench.DefaultThroughputN, "number of jobs")
	cmd.Flags().StringSliceVar(&tracing, "tracing", []string{"off"},
		"trace the client and worker with the OpenTelemetry SDK (spans dropped by a no-op exporter): off, always (always-on sampler) or a sampling ratio such as 0.01; "+
			"several (off,always,0.01) alternate, each on a fresh database, with a summary of each mode's rate against off")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "how many times each --tracing mode runs, alternating")
	cmd.Flags().IntVar(&o.insertBatch, "insert-batch", 1000, "jobs per EnqueueMany call of the pre-insert")
	cmd.Flags().BoolVar(&o.record, "record", false,
		"each handler records a result (redrive.Record, as the http kind does): a history event per success")
	cmd.Flags().IntVar(&o.limited, "limited", 0,
		"also insert this many jobs under a concurrency limit of 5 per key, first, whose handlers hold their slots: all but 5 per key wait through the burn-down (raise --workers by 5 per key)")
	cmd.Flags().IntVar(&o.limitKeys, "limit-keys", 10, "keys of the --limited jobs")
	addProcessesFlag(cmd, o)
	return cmd
}

func newBenchContinuousCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.ContinuousParams{Producers: bench.DefaultProducers, Batch: bench.DefaultBatch,
		RetryEvery: bench.DefaultRetryEvery, RetryWorkers: bench.DefaultRetryWorkers, BurnDown: bench.DefaultBurnDown}
	duration, warmup := bench.DefaultDuration, bench.DefaultWarmup
	retryDelay := bench.DefaultProbeDelay
	cmd := &cobra.Command{
		Use:   "continuous",
		Short: "Producers enqueue while the worker burns down, for a duration",
		Long: `Producers enqueue no-op jobs continuously (EnqueueMany batches) while the
worker burns them down. Reports the completed and enqueued jobs per second
in steady state (the warm-up excluded) and the backlog left at the end.

One job in --retry-every is a retry probe, in a queue of its own served by
the same worker (--retry-workers handlers): it fails once and is retried
after --retry-delay; the retry's lateness (start minus due time) under the
flood is reported. Before the flood, a burn-down of --burn-down jobs with
the same settings (throughput workload, fresh database) gives the rate the
completed rate is compared with, in the same run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Producers < 1:
				return flagErrorf(cmd, "--producers must be at least 1, got %d", p.Producers)
			case p.Batch < 1:
				return flagErrorf(cmd, "--batch must be at least 1, got %d", p.Batch)
			case p.Rate < 0:
				return flagErrorf(cmd, "--rate must not be negative, got %v", p.Rate)
			case warmup < 0:
				return flagErrorf(cmd, "--warmup must not be negative, got %s", warmup)
			case duration <= warmup:
				return flagErrorf(cmd, "--duration (%s) must be longer than --warmup (%s)", duration, warmup)
			case p.RetryEvery < 0:
				return flagErrorf(cmd, "--retry-every must not be negative, got %d", p.RetryEvery)
			case p.RetryEvery > 0 && retryDelay <= 0:
				return flagErrorf(cmd, "--retry-delay must be positive, got %s", retryDelay)
			case p.RetryWorkers < 1 && p.RetryEvery > 0:
				return flagErrorf(cmd, "--retry-workers must be at least 1, got %d", p.RetryWorkers)
			case p.BurnDown < 0:
				return flagErrorf(cmd, "--burn-down must not be negative, got %d", p.BurnDown)
			}
			p.Duration, p.Warmup = bench.Duration(duration), bench.Duration(warmup)
			p.RetryDelay = bench.Duration(retryDelay)
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Continuous(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Producers, "producers", p.Producers, "producer goroutines")
	f.IntVar(&p.Batch, "batch", p.Batch, "jobs per EnqueueMany call")
	f.Float64Var(&p.Rate, "rate", 0, "cap on the total enqueue rate in jobs/s (0: as fast as possible)")
	f.DurationVar(&duration, "duration", duration, "length of the run, warm-up included")
	f.DurationVar(&warmup, "warmup", warmup, "start of the run left out of the steady-state rates")
	f.IntVar(&p.RetryEvery, "retry-every", p.RetryEvery, "one job in this many is a retry probe (0: none)")
	f.Int64Var(&p.MinCompleted, "min-completed", 0, "measure past --duration until this many jobs completed in the window (and, with probes, a retry due in it ran); 0: stop at --duration")
	f.DurationVar(&retryDelay, "retry-delay", retryDelay, "the retry probes' retry delay")
	f.IntVar(&p.RetryWorkers, "retry-workers", p.RetryWorkers, "handlers of the retry probes' queue")
	f.IntVar(&p.BurnDown, "burn-down", p.BurnDown, "jobs of the burn-down measured first with the same settings (0: none)")
	return cmd
}

func newBenchFailureCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "failure",
		Short: "N jobs fail twice, then succeed: the engine's cost of failure",
		Long: `Pre-insert N jobs that each fail on attempts 1 and 2 and succeed on attempt
3, under a policy of 1ms initial delay without jitter, so that the figures
measure the engine's overhead rather than waiting. Reports completed jobs/s
and attempts/s, and checks the store's counters (succeeded_after_retry == N,
retried == 2N).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return flagErrorf(cmd, "-n must be at least 1, got %d", n)
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Failure(ctx, cfg, n))
			})
		},
	}
	cmd.Flags().IntVarP(&n, "jobs", "n", bench.DefaultFailureN, "number of jobs")
	return cmd
}

func newBenchLatenessCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	n, delay, interval := bench.DefaultLatenessN, bench.DefaultRetryDelay, bench.DefaultInterval
	cmd := &cobra.Command{
		Use:   "lateness",
		Short: "N jobs fail once and retry after 1s: how late does the retry start?",
		Long: `With the worker running, enqueue N jobs one by one, --interval apart (as the
River anchor's lateness mode does: 20ms). Each fails its first attempt and is
retried once after 1s (no jitter). On the retry the handler records how late
it started, against the job's due time and against its first failure + 1s
(the anchor's measure); p50, p99 and max are reported.

With --database-url and --processes N, N worker processes (this binary,
re-executed) share the work and this process only enqueues: a retry may run
in another process than its failure, woken by LISTEN/NOTIFY; the figures
then also split the lateness between retries in another process and in the
same one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case n < 1:
				return flagErrorf(cmd, "-n must be at least 1, got %d", n)
			case delay <= 0:
				return flagErrorf(cmd, "--retry-delay must be positive, got %s", delay)
			case interval < 0:
				return flagErrorf(cmd, "--interval must not be negative, got %s", interval)
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Lateness(ctx, cfg, n, delay, interval))
			})
		},
	}
	f := cmd.Flags()
	f.IntVarP(&n, "jobs", "n", n, "number of jobs")
	f.DurationVar(&interval, "interval", interval, "time between two enqueues")
	f.DurationVar(&delay, "retry-delay", delay, "retry delay (tests shorten it)")
	_ = f.MarkHidden("retry-delay")
	addProcessesFlag(cmd, o)
	return cmd
}

func newBenchDepthCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.DepthParams{Waiting: bench.DefaultWaiting, Due: bench.DefaultDue, Compare: bench.DefaultCompare}
	var spread, lead time.Duration
	cmd := &cobra.Command{
		Use:   "depth",
		Short: "Burn-down of due jobs behind a deep backlog of waiting ones",
		Long: `Pre-insert --waiting jobs due a year from now and --due no-op jobs due now (in
the same queue, EnqueueMany in batches of 10000), then time the burn-down of
the due ones while sampling the process's resident memory (VmRSS) every
100ms. Unless --compare is 0 or equal to --waiting, the same run is repeated
on a fresh database with --compare waiting jobs and the rates are compared.

With --spread, the waiting jobs are due evenly over that span instead,
starting --lead after their insert began (a backlog due over the next hour:
--spread 1h). Waiting jobs that become due during the burn-down run too;
they are counted apart, not in its rate. On PostgreSQL, --settle vacuums and
analyzes the jobs table and takes a checkpoint before each burn-down, as
autovacuum would have done for a backlog built over hours.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Waiting < 0:
				return flagErrorf(cmd, "--waiting must not be negative, got %d", p.Waiting)
			case p.Due < 1:
				return flagErrorf(cmd, "--due must be at least 1, got %d", p.Due)
			case p.Compare < 0:
				return flagErrorf(cmd, "--compare must not be negative, got %d", p.Compare)
			case spread < 0:
				return flagErrorf(cmd, "--spread must not be negative, got %s", spread)
			case lead <= 0:
				return flagErrorf(cmd, "--lead must be positive, got %s", lead)
			}
			p.Spread = bench.Duration(spread)
			if spread > 0 {
				p.Lead = bench.Duration(lead)
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Depth(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Waiting, "waiting", p.Waiting, "jobs waiting (due far in the future)")
	f.IntVar(&p.Due, "due", p.Due, "no-op jobs due now, burnt down")
	f.IntVar(&p.Compare, "compare", p.Compare, "waiting jobs of the baseline run (0: no baseline)")
	f.DurationVar(&spread, "spread", 0, "waiting jobs due evenly over this span (0: all a year ahead)")
	f.DurationVar(&lead, "lead", bench.DefaultDepthLead, "with --spread, when the first waiting job is due, after their insert began")
	f.BoolVar(&p.Settle, "settle", false, "PostgreSQL: VACUUM (ANALYZE) the jobs and CHECKPOINT before the burn-down, in both runs")
	return cmd
}

func newBenchPriorityCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.PriorityParams{Backlog: bench.DefaultPriorityBacklog, Probes: bench.DefaultPriorityProbes,
		Interval: bench.Duration(bench.DefaultPriorityInterval)}
	var interval = bench.DefaultPriorityInterval
	cmd := &cobra.Command{
		Use:   "priority",
		Short: "Start latency of high-priority jobs behind a backlog of due ones",
		Long: `Pre-insert --backlog no-op jobs of the default priority (0), all due, start the
worker, and while it burns them down enqueue --probes jobs of priority 10, one
every --interval. Each probe's latency is from the start of its Enqueue call
to the start of its handler; the p50, p90, p99 and the largest are printed,
with how many backlog jobs had not started when the last probe did (the run
fails its check when the backlog ran out first).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Backlog < 1:
				return flagErrorf(cmd, "--backlog must be at least 1, got %d", p.Backlog)
			case p.Probes < 1:
				return flagErrorf(cmd, "--probes must be at least 1, got %d", p.Probes)
			case interval < 0:
				return flagErrorf(cmd, "--interval must not be negative, got %s", interval)
			}
			p.Interval = bench.Duration(interval)
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Priority(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Backlog, "backlog", p.Backlog, "due jobs of the default priority ahead of the probes")
	f.IntVar(&p.Probes, "probes", p.Probes, "high-priority jobs enqueued during the burn-down")
	f.DurationVar(&interval, "interval", interval, "time between two probes")
	return cmd
}

func newBenchFairCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.FairParams{Big: bench.DefaultFairBig, SmallKeys: bench.DefaultFairSmallKeys, PerSmall: bench.DefaultFairPerSmall}
	cmd := &cobra.Command{
		Use:   "fair",
		Short: "Fair shares: small tenants' jobs behind one tenant's backlog",
		Long: `Make the default queue fair on payload.tenant, pre-insert --big no-op jobs of
one tenant, then --per-small jobs of each of --small-keys other tenants, all
due, and start the worker. Printed: how many of the big tenant's jobs had
completed when the last small tenant's job completed (the check fails above
2% of --big), when that was, and the burn-down rate of the whole.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Big < 1 || p.SmallKeys < 1 || p.PerSmall < 1 {
				return flagErrorf(cmd, "--big, --small-keys and --per-small must be at least 1")
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Fair(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Big, "big", p.Big, "due jobs of the big tenant, enqueued first")
	f.IntVar(&p.SmallKeys, "small-keys", p.SmallKeys, "small tenants")
	f.IntVar(&p.PerSmall, "per-small", p.PerSmall, "due jobs of each small tenant")
	return cmd
}

func newBenchDLQCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.DLQParams{Jobs: bench.DefaultDLQJobs, Queues: bench.DefaultDLQQueues, Causes: bench.DefaultDLQCauses,
		Pages: bench.DefaultDLQPages, Repeat: bench.DefaultDLQRepeat, Redrive: bench.DefaultDLQRedrive}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Listings, groups, counts and a durable redrive of a deep DLQ",
		Long: `Fill a fresh store with -n dead jobs through Client.AddDead (in --queues
queues, --causes causes), then time, through the Client (what the REST
API's handlers call): the dead-only listing's first page and --pages pages
by cursor from the top and from the middle, unfiltered and filtered by
queue, kind, class, reason and an error-text prefix; the groups (limit
200, as the dashboard asks); the counts; and last a durable redrive
operation of the --redrive newest dead jobs. Each call is timed --repeat
times (listings: once per page); p50, p99 and max are printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Jobs < 1 || p.Queues < 1 || p.Causes < 1:
				return flagErrorf(cmd, "-n, --queues and --causes must be at least 1")
			case p.Pages < 1 || p.Repeat < 1:
				return flagErrorf(cmd, "--pages and --repeat must be at least 1")
			case p.Redrive < 0 || p.Redrive > p.Jobs:
				return flagErrorf(cmd, "--redrive must be between 0 and -n, got %d", p.Redrive)
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.DLQ(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVarP(&p.Jobs, "jobs", "n", p.Jobs, "dead jobs")
	f.IntVar(&p.Queues, "queues", p.Queues, "queues the dead jobs are spread over")
	f.IntVar(&p.Causes, "causes", p.Causes, "causes of death (kind, class, reason, error)")
	f.IntVar(&p.Pages, "pages", p.Pages, "pages each listing follows by cursor")
	f.IntVar(&p.Repeat, "repeat", p.Repeat, "times each groups or count call is timed")
	f.IntVar(&p.Redrive, "redrive", p.Redrive, "newest dead jobs a durable redrive moves back (0: none)")
	return cmd
}

func newBenchRateCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.RateParams{Rate: bench.DefaultRateLimit, Burst: bench.DefaultRateBurst, Processes: bench.DefaultRateProcesses}
	duration := bench.DefaultRateDuration
	cmd := &cobra.Command{
		Use:   "rate",
		Short: "A fleet-wide rate limit shared by worker processes: rate held, worst window",
		Long: `Enqueue more no-op jobs under one rate limit (--rate, --burst) than it lets
start in --duration, run --processes worker processes on the database (on
SQLite, processes on the one file; with --database-url, on PostgreSQL) for
--duration, and compare the starts their handlers saw with the limit: the
rate achieved over --duration (and its deviation from the limit's), and the
worst window: the most that the starts in any window [t1, t2] went above
burst + rate*(t2 - t1), from the handlers' clocks and from the start times
the store recorded when it leased each job.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Processes < 1:
				return flagErrorf(cmd, "--processes must be at least 1, got %d", p.Processes)
			case duration <= 0:
				return flagErrorf(cmd, "--duration must be positive, got %s", duration)
			case p.Burst < 1:
				return flagErrorf(cmd, "--burst must be at least 1, got %d", p.Burst)
			}
			if _, err := redrive.ParseRate(p.Rate); err != nil {
				return flagErrorf(cmd, "--rate: %v", err)
			}
			p.Duration = bench.Duration(duration)
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Rate(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Rate, "rate", p.Rate, "the limit's rate, N/interval")
	f.IntVar(&p.Burst, "burst", p.Burst, "the limit's burst")
	f.DurationVar(&duration, "duration", duration, "how long the workers run")
	f.IntVar(&p.Processes, "processes", p.Processes, "worker processes sharing the limit")
	return cmd
}
