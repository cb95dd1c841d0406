package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/strictjson"
	jobsummary "github.com/redrivehq/redrive/internal/summary"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

const connHelp = `
With --server URL (default $` + serverEnv + `; --token or $` + tokenEnv + ` for its bearer
token) the command calls that server's REST API. Without, it opens the store
directly: the SQLite database --db, or PostgreSQL with --database-url
(default $` + databaseURLEnv + `).`

const bulkHelp = `
A progress bar shows on standard error when it is a terminal (otherwise a
plain line every few seconds, or nothing with --json); standard output gets
the result only. With --server the server runs it as an operation
(/v1/operations/{id}) that the CLI polls; Ctrl-C cancels it there too, and
what was done stays done.
`

// withBackend runs f on the backend the flags select, and closes it.
func withBackend(g *globalOptions, c *connOptions, f func(ctx context.Context, b backend) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		b, err := openBackend(cmd.Context(), g, cmd, c)
		if err != nil {
			return err
		}
		err = f(cmd.Context(), b)
		return errors.Join(err, b.Close())
	}
}

// parseID parses a job id argument.
func parseID(cmd *cobra.Command, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, flagErrorf(cmd, "job id must be a positive integer, got %q", s)
	}
	return id, nil
}

// newEnqueueCmd is `redrive enqueue KIND`.
func newEnqueueCmd(g *globalOptions) *cobra.Command {
	var (
		c          = connOptions{create: true}
		payload    string
		queue, key string
		delay      time.Duration
		maxRetries int
		priority   int
		existing   bool
		dependency string
		notReproc  bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND",
		Short: "Enqueue a job",
		Long:  "Enqueue a job of KIND with a JSON payload.\n" + connHelp,
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		in := server.EnqueueRequest{Kind: args[0], Queue: queue, IdempotencyKey: key, ReturnExisting: existing,
			Dependency: dependency, NotReprocessable: notReproc}
		if payload != "" {
			if !json.Valid([]byte(payload)) {
				return flagErrorf(cmd, "--payload is not valid JSON: %q", clipArg(payload))
			}
			if err := strictjson.Check([]byte(payload), nil); err != nil {
				return flagErrorf(cmd, "--payload: %v", err)
			}
			in.Payload = json.RawMessage(payload)
		}
		if delay < 0 {
			return flagErrorf(cmd, "--delay must not be negative")
		}
		if delay > 0 {
			in.Delay = delay.String()
		}
		if cmd.Flags().Changed("max-retries") {
			if maxRetries < 0 {
				return flagErrorf(cmd, "--max-retries must not be negative")
			}
			in.MaxRetries = &maxRetries
		}
		if err := checkPriorityFlag(cmd, "--priority", priority); err != nil {
			return err
		}
		in.Priority = priority
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			j, err := b.Enqueue(ctx, in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if j.Warning != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", j.Warning)
			}
			if g.JSON {
				return writeJSON(out, j)
			}
			if j.Existing {
				what := ""
				if j.Gone {
					what = ", deleted since; the key is kept"
				}
				if j.Conflict {
					what += ", a different job"
				}
				_, err = fmt.Fprintf(out, "job %d already holds key %q (%s, state %s%s); nothing enqueued\n", j.ID, j.IdempotencyKey, j.Kind, j.State, what)
				return err
			}
			_, err = fmt.Fprintf(out, "enqueued job %d: kind %s, queue %s, %s, due %s\n", j.ID, j.Kind, j.Queue, j.State, fmtTime(j.RunAt))
			return err
		})(cmd, args)
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "the job's payload, as JSON")
	f.StringVar(&queue, "queue", "", "queue (default \"default\")")
	durationFlag(f, &delay, "delay", 0, "run the job after this delay (e.g. 30s, 1h, 7d)")
	f.IntVar(&maxRetries, "max-retries", 0, "retries after the first attempt (default: the policy's)")
	f.IntVar(&priority, "priority", redrive.DefaultPriority, fmt.Sprintf("priority from %d to %d: the due jobs of a queue start highest first", redrive.MinPriority, redrive.MaxPriority))
	f.StringVar(&key, "key", "", "idempotency key: enqueue nothing while a job holds it (a different job holding it is an error)")
	f.BoolVar(&existing, "return-existing", false, "with --key: when a different job holds the key, show it instead of failing")
	f.StringVar(&dependency, "dependency", "", "the circuit breaker guarding the job (jobs naming the same one share it)")
	f.BoolVar(&notReproc, "not-reprocessable", false, "the job must never be redriven from the DLQ")
	addConnFlags(cmd, &c)
	return cmd
}

// newJobsCmd is `redrive jobs`.
func newJobsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, show, cancel and reprioritize jobs", Args: cobra.NoArgs}
	cmd.AddCommand(newListCmd(g, false), newShowCmd(g, false), newCancelCmd(g), newPriorityCmd(g), newRunNowCmd(g))
	return cmd
}

// checkPriorityFlag refuses a priority out of range, given as name.
func checkPriorityFlag(cmd *cobra.Command, name string, p int) error {
	if p < redrive.MinPriority || p > redrive.MaxPriority {
		return flagErrorf(cmd, "%s must be an integer from %d to %d, got %d", name, redrive.MinPriority, redrive.MaxPriority, p)
	}
	return nil
}

// newPriorityCmd is `redrive jobs priority ID --priority N`.
func newPriorityCmd(g *globalOptions) *cobra.Command {
	var (
		c connOptions
		p int
	)
	cmd := &cobra.Command{Use: "priority ID --priority N", Short: "Change a waiting job's priority",
		Long: fmt.Sprintf(`Change the priority of a pending or scheduled job to N, from %d to %d
(higher starts first; 0 is the default). A running or finished job's
priority cannot change.
`, redrive.MinPriority, redrive.MaxPriority) + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(cmd, args[0])
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("priority") {
			return flagErrorf(cmd, "--priority is required: an integer from %d to %d", redrive.MinPriority, redrive.MaxPriority)
		}
		if err := checkPriorityFlag(cmd, "--priority", p); err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			j, err := b.SetPriority(ctx, id, p)
			if err != nil {
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "job %d: %s, priority %d\n", j.ID, j.State, j.Priority)
			return err
		})(cmd, args)
	}
	cmd.Flags().IntVar(&p, "priority", 0, fmt.Sprintf("the new priority, from %d to %d", redrive.MinPriority, redrive.MaxPriority))
	addConnFlags(cmd, &c)
	return cmd
}

// newDLQCmd is `redrive dlq`.
func newDLQCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Browse, redrive, purge and export the dead-letter queue", Args: cobra.NoArgs}
	cmd.AddCommand(newListCmd(g, true), newGroupsCmd(g), newShowCmd(g, true), newRedriveCmd(g), newPurgeCmd(g), newExportCmd(g), newImportCmd(g))
	amqpDLQCommands(g, cmd)
	kafkaDLQCommands(g, cmd)
	return cmd
}

// listedPage is a page of jobs as GET /v1/jobs gives it.
type listedPage struct {
	Jobs []listedJob `json:"jobs"`
	Next string      `json:"next"`
}

// listedJob is a job of a listing: its history left out.
type listedJob struct {
	*redrive.Job
	// History hides the job's.
	History []redrive.Event `json:"history,omitempty"`
}

func newListCmd(g *globalOptions, dead bool) *cobra.Command {
	var (
		c connOptions
		q = listQuery{Dead: dead}
	)
	short := "List jobs, newest first"
	if dead {
		short = "List dead jobs, newest first"
	}
	long := short + `.

When the jobs fill more than one page, a line under the table says how many
the page shows of how many match ("showing 50 of 1,234 jobs"), then the
cursor of the next page. Each job shows a one-line summary: an http job's
method and URL (without its query), an excerpt of any other payload
(without what looks secret). --json prints the page only, without the
jobs' histories (redrive jobs show ID has it).
` + connHelp
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: short, Long: long, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		if q.Limit < 0 || q.Limit > store.MaxPageSize {
			return flagErrorf(cmd, "--limit must be from 1 to %d", store.MaxPageSize)
		}
		if q.Match != "" {
			if _, err := parsePayloadMatch(q.Match); err != nil {
				return flagErrorf(cmd, "%s", err)
			}
		}
		res, err := b.List(ctx, q)
		if err != nil {
			return err
		}
		if res.Jobs == nil {
			res.Jobs = []*redrive.Job{}
		}
		for _, j := range res.Jobs {
			if j.Summary == "" {
				j.Summary = jobsummary.Of(j.Kind, j.Payload)
			}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			// The API's listing: summaries, no history.
			page := listedPage{Jobs: make([]listedJob, len(res.Jobs)), Next: res.Next}
			for i, j := range res.Jobs {
				page.Jobs[i] = listedJob{Job: j}
			}
			return writeJSON(out, page)
		}
		summary := ""
		if res.Next != "" || q.Cursor != "" {
			// More than one page: say how many match in all.
			total, err := b.Count(ctx, q)
			if err != nil {
				return fmt.Errorf("count the matching jobs: %w", err)
			}
			summary = pageSummary(len(res.Jobs), total, q.Cursor != "", dead)
		}
		return writeJobList(out, res, dead, summary)
	})
	addFilterFlags(cmd, &q.filterOptions)
	addErrorPrefixFlag(cmd, &q.filterOptions)
	f := cmd.Flags()
	if !dead {
		f.StringSliceVar(&q.States, "state", nil, "only jobs in these states (pending, scheduled, running, completed, dead, canceled, blocked)")
	}
	f.StringVar(&q.Match, "match", "", "only jobs whose payload holds this value: payload.FIELD=VALUE (e.g. payload.customer_id=42)")
	f.IntVar(&q.Limit, "limit", 0, fmt.Sprintf("jobs per page (default %d, at most %d)", store.DefaultPageSize, store.MaxPageSize))
	f.StringVar(&q.Cursor, "cursor", "", "the next page: the cursor the previous page printed")
	addConnFlags(cmd, &c)
	return cmd
}

func newShowCmd(g *globalOptions, dead bool) *cobra.Command {
	var c connOptions
	short := "Show a job and its history"
	if dead {
		short = "Show a dead job, its error and its history"
	}
	cmd := &cobra.Command{Use: "show ID", Short: short, Long: short + ".\n" + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(cmd, args[0])
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			j, err := b.Get(ctx, id)
			if err != nil {
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			if dead && j.State != redrive.Dead {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: job %d is not in the DLQ (it is %s)\n", j.ID, j.State)
			}
			return writeJob(cmd.OutOrStdout(), j)
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

func newCancelCmd(g *globalOptions) *cobra.Command {
	var (
		c        connOptions
		fo       filterOptions
		states   []string
		match    string
		batch    int
		rate     float64
		note     string
		all, yes bool
		detach   bool
	)
	cmd := &cobra.Command{Use: "cancel ID | ID... | [filters] (--all for every waiting job)",
		Short: "Cancel a job, or the pending and scheduled jobs matching filters",
		Long: `Cancel a job: a pending, scheduled or dead job is canceled at once; a
running job's worker is asked to stop it (at its next heartbeat).
Canceling a dead job takes it out of the DLQ, so it is refused unless --yes
(dlq purge deletes dead jobs).

With several ids, filters (--queue, --kind, --since, --until, --state
pending|scheduled, --match payload.FIELD=VALUE...) or --all, it cancels
the pending and scheduled jobs selected, as a durable operation (see
redrive operations): in batches (--batch, default 100) in id order, at
most --rate jobs a second. Running jobs are never canceled in bulk: a
filter selects pending and scheduled jobs only, and the ids given that are
not pending or scheduled are counted as skipped; cancel a running job by
its id alone. It asks for confirmation on standard input, saying how many
jobs match, unless --yes.
` + operationsHelp + connHelp, Args: cobra.ArbitraryArgs}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		bulk := len(args) != 1 || !fo.empty() || len(states) > 0 || match != "" || all || batch != 0 || rate != 0 || note != "" || detach
		if !bulk {
			return cancelOne(cmd, g, &c, yes, args)
		}
		var ids []int64
		for _, a := range args {
			id, err := parseID(cmd, a)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		q := cancelQuery{IDs: ids, Flags: fo, States: states, All: all, Batch: batch, Rate: rate, Note: note}
		hasFilter := !fo.empty() || len(states) > 0 || match != ""
		switch {
		case len(ids) > 0 && (hasFilter || all):
			return flagErrorf(cmd, "give job ids or filters (or --all), not both")
		case len(ids) == 0 && !hasFilter && !all:
			return flagErrorf(cmd, "say which jobs to cancel: an id, filters, or --all for every pending and scheduled job")
		case len(ids) > server.MaxRedriveIDs:
			return flagErrorf(cmd, "%d ids, the limit is %d: cancel by filter instead", len(ids), server.MaxRedriveIDs)
		case batch < 0 || batch > store.MaxPageSize:
			return flagErrorf(cmd, "--batch must be from 1 to %d", store.MaxPageSize)
		case rate < 0:
			return flagErrorf(cmd, "--rate must not be negative")
		}
		if match != "" {
			var err error
			if q.Match, err = parsePayloadMatch(match); err != nil {
				return flagErrorf(cmd, "%v", err)
			}
		}
		var sts []redrive.State
		for _, s := range states {
			st, err := store.ParseState(s)
			if err != nil || (st != redrive.Pending && st != redrive.Scheduled) {
				return flagErrorf(cmd, "--state: a bulk cancel selects pending or scheduled jobs, got %q (cancel a running job by its id alone)", s)
			}
			sts = append(sts, st)
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			n := int64(len(ids))
			what := jobsWord(n, "")
			if len(ids) == 0 {
				f, err := fo.toFilter()
				if err != nil {
					return flagErrorf(cmd, "%v", err)
				}
				f.States, f.PayloadField, f.PayloadValue = sts, q.Match.Field, q.Match.Value
				q.Filter = f
				count := listQuery{filterOptions: fo, States: states, Match: match}
				if len(count.States) == 0 {
					count.States = []string{string(redrive.Pending), string(redrive.Scheduled)}
				}
				if n, err = b.Count(ctx, count); err != nil {
					return err
				}
				if n == 0 {
					if g.JSON {
						return writeJSON(cmd.OutOrStdout(), map[string]any{"canceled": 0})
					}
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "no pending or scheduled job matches: nothing to cancel")
					return err
				}
				what = jobsWord(n, "pending and scheduled")
				if cond := fo.describe(); cond != "" || match != "" {
					what += " matching " + strings.TrimSpace(cond+" "+match)
				}
				if n < 0 {
					what = "the pending and scheduled jobs matching the filters"
				}
			}
			if err := confirm(cmd, yes, fmt.Sprintf("Cancel %s?", what)); err != nil {
				return err
			}
			op, err := b.StartCancel(ctx, q)
			if err != nil {
				return err
			}
			if detach {
				if g.JSON {
					return writeJSON(cmd.OutOrStdout(), op)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "operation %s started (follow it: redrive operations follow %s)\n", op.ID, op.ID)
				return err
			}
			return followAndReport(ctx, cmd, g, b, op, true)
		})(cmd, args)
	}
	addFilterFlags(cmd, &fo)
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only jobs in these states: pending, scheduled (default both)")
	f.StringVar(&match, "match", "", "only jobs whose payload holds this value: payload.FIELD=VALUE (e.g. payload.customer_id=42)")
	f.IntVar(&batch, "batch", 0, fmt.Sprintf("jobs per batch, each in one transaction (default %d)", redrive.DefaultOperationBatch))
	f.Float64Var(&rate, "rate", 0, "at most this many jobs per second (0: no bound)")
	f.StringVar(&note, "note", "", "recorded in each canceled job's history (who, why)")
	f.BoolVar(&all, "all", false, "cancel every pending and scheduled job when no filter is given")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation; with one id, cancel a dead job too (it leaves the DLQ)")
	f.BoolVar(&detach, "detach", false, "start the cancel and return: a worker runs it (follow it with redrive operations follow ID)")
	addConnFlags(cmd, &c)
	return cmd
}

// cancelOne cancels the job of args[0] (jobs cancel ID).
func cancelOne(cmd *cobra.Command, g *globalOptions, c *connOptions, yes bool, args []string) error {
	id, err := parseID(cmd, args[0])
	if err != nil {
		return err
	}
	return withBackend(g, c, func(ctx context.Context, b backend) error {
		if !yes {
			cur, err := b.Get(ctx, id)
			if err != nil {
				return err
			}
			if cur.State == redrive.Dead {
				return flagErrorf(cmd, "job %d is dead (in the DLQ); canceling removes it from the DLQ: use dlq purge, or --yes to cancel it anyway", id)
			}
		}
		j, err := b.Cancel(ctx, id)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), j)
		}
		msg := fmt.Sprintf("job %d: %s", j.ID, j.State)
		if j.State == redrive.Running && j.CancelRequested {
			msg += " (cancel requested: the worker stops it at its next heartbeat)"
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
		return err
	})(cmd, args)
}

func newStatsCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "stats", Short: "Show jobs per queue and state, and running totals", Long: "Show statistics.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		s, err := b.Stats(ctx)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), s)
		}
		return writeStats(cmd.OutOrStdout(), s)
	})
	addConnFlags(cmd, &c)
	return cmd
}

func newGroupsCmd(g *globalOptions) *cobra.Command {
	var (
		c     connOptions
		fo    filterOptions
		limit int
	)
	cmd := &cobra.Command{Use: "groups", Short: "Count dead jobs by cause, largest first", Long: "Count dead jobs by cause (error fingerprint).\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		gs, err := b.Groups(ctx, fo, limit)
		if err != nil {
			return err
		}
		if gs == nil {
			gs = []redrive.Group{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, map[string]any{"groups": gs})
		}
		if len(gs) == 0 {
			_, err := fmt.Fprintln(out, "the DLQ is empty")
			return err
		}
		return writeTable(out, []string{"COUNT", "FINGERPRINT", "CLASS", "REASON", "QUEUE", "KIND", "LAST DEAD", "SAMPLE ERROR"}, func(row func(...any)) {
			for _, gr := range gs {
				row(gr.Count, gr.Fingerprint, gr.Class, gr.Reason, gr.Queue, gr.Kind, fmtTime(gr.Last), oneLine(gr.Sample, 60))
			}
		})
	})
	addFilterFlags(cmd, &fo)
	addErrorPrefixFlag(cmd, &fo)
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many groups")
	addConnFlags(cmd, &c)
	return cmd
}
