package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
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
		existing   bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND",
		Short: "Enqueue a job",
		Long:  "Enqueue a job of KIND with a JSON payload.\n" + connHelp,
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		in := server.EnqueueRequest{Kind: args[0], Queue: queue, IdempotencyKey: key, ReturnExisting: existing}
		if payload != "" {
			if !json.Valid([]byte(payload)) {
				return flagErrorf(cmd, "--payload is not valid JSON: %q", clipArg(payload))
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
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			j, err := b.Enqueue(ctx, in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
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
	f.DurationVar(&delay, "delay", 0, "run the job after this delay (e.g. 30s, 1h)")
	f.IntVar(&maxRetries, "max-retries", 0, "retries after the first attempt (default: the policy's)")
	f.StringVar(&key, "key", "", "idempotency key: enqueue nothing while a job holds it (a different job holding it is an error)")
	f.BoolVar(&existing, "return-existing", false, "with --key: when a different job holds the key, show it instead of failing")
	addConnFlags(cmd, &c)
	return cmd
}

// newJobsCmd is `redrive jobs`.
func newJobsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, show and cancel jobs", Args: cobra.NoArgs}
	cmd.AddCommand(newListCmd(g, false), newShowCmd(g, false), newCancelCmd(g))
	return cmd
}

// newDLQCmd is `redrive dlq`.
func newDLQCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Browse, redrive, purge and export the dead-letter queue", Args: cobra.NoArgs}
	cmd.AddCommand(newListCmd(g, true), newGroupsCmd(g), newShowCmd(g, true), newRedriveCmd(g), newPurgeCmd(g), newExportCmd(g))
	amqpDLQCommands(g, cmd)
	kafkaDLQCommands(g, cmd)
	return cmd
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
cursor of the next page. --json prints the page only.
` + connHelp
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: short, Long: long, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		if q.Limit < 0 || q.Limit > store.MaxPageSize {
			return flagErrorf(cmd, "--limit must be from 1 to %d", store.MaxPageSize)
		}
		res, err := b.List(ctx, q)
		if err != nil {
			return err
		}
		if res.Jobs == nil {
			res.Jobs = []*redrive.Job{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, res)
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
	f := cmd.Flags()
	if !dead {
		f.StringSliceVar(&q.States, "state", nil, "only jobs in these states (pending, scheduled, running, completed, dead, canceled)")
	}
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
		c   connOptions
		yes bool
	)
	cmd := &cobra.Command{Use: "cancel ID", Short: "Cancel a waiting, running or dead job",
		Long: `Cancel a job. Canceling a dead job takes it out of the DLQ, so it is
refused unless --yes (dlq purge deletes dead jobs).
` + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(cmd, args[0])
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
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
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "cancel a dead job too (it leaves the DLQ)")
	addConnFlags(cmd, &c)
	return cmd
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
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many groups")
	addConnFlags(cmd, &c)
	return cmd
}

func newRedriveCmd(g *globalOptions) *cobra.Command {
	var (
		c                connOptions
		q                redriveQuery
		allMatching, yes bool
		payload          string
	)
	cmd := &cobra.Command{
		Use:   "redrive (ID... | --all [filters])",
		Short: "Move dead jobs back to pending",
		Long: `Redrive dead jobs: by id, or every dead job matching the filters with
--all (with no filter: every dead job; --all-matching is its old name). A
redrive by id that names a job that does not exist or is not dead redrives
the others, then says which and exits with an error. A redrive by filter asks for
confirmation on standard input unless --yes, saying how many dead jobs match
("Redrive 1,234 dead jobs matching queue=mail? [y/N]"); when none match, it
says so and does nothing.
` + bulkHelp + connHelp,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("all-matching") {
			fmt.Fprintln(cmd.ErrOrStderr(), "note: --all-matching is deprecated: use --all")
		}
		switch {
		case len(args) > 0 && allMatching:
			return flagErrorf(cmd, "give job ids or --all, not both")
		case len(args) == 0 && !allMatching:
			return flagErrorf(cmd, "say which dead jobs to redrive: job ids, or --all with filters")
		case len(args) > 0 && !q.Filter.empty():
			return flagErrorf(cmd, "filters apply to --all, not to job ids")
		}
		for _, a := range args {
			id, err := parseID(cmd, a)
			if err != nil {
				return err
			}
			if !slices.Contains(q.IDs, id) {
				q.IDs = append(q.IDs, id)
			}
		}
		if payload != "" {
			if !json.Valid([]byte(payload)) {
				return flagErrorf(cmd, "--payload is not valid JSON: %q", clipArg(payload))
			}
			q.Payload = json.RawMessage(payload)
		}
		if q.Rate < 0 {
			return flagErrorf(cmd, "--rate must not be negative")
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			out := cmd.OutOrStdout()
			// Which of the ids given cannot be redriven, and why: said
			// after the redrive of the others, which then fails.
			var missing []string
			if len(q.IDs) > 0 && len(q.IDs) <= maxCheckedIDs {
				var err error
				if missing, err = checkDeadIDs(ctx, b, q.IDs); err != nil {
					return err
				}
			}
			if allMatching {
				n, err := confirmDLQ(ctx, cmd, b, yes, "Redrive", q.Filter)
				if err != nil {
					return err
				}
				if n == 0 {
					if g.JSON {
						return writeJSON(out, redrive.RedriveProgress{Done: true})
					}
					_, err := fmt.Fprintln(out, nothingSelected(q.Filter, "redrive"))
					return err
				}
			}
			bar := newProgressBar(cmd, g, "redrive")
			prog, err := b.Redrive(ctx, q, func(p redrive.RedriveProgress) {
				bar.update(p.Redriven+p.Refused+p.Skipped, p.Matched, fmt.Sprintf("refused %d, skipped %d", p.Refused, p.Skipped))
			})
			bar.finish()
			if err != nil {
				if done := prog.Redriven + prog.Refused + prog.Skipped; done > 0 {
					return fmt.Errorf("redrive stopped after redriving %d of %d (refused %d, skipped %d): %w",
						prog.Redriven, prog.Matched, prog.Refused, prog.Skipped, err)
				}
				return err
			}
			if g.JSON {
				if err := writeJSON(out, prog); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "redriven %d of %d matched; refused %d (not reprocessable), skipped %d (gone or not dead)\n",
					prog.Redriven, prog.Matched, prog.Refused, prog.Skipped)
				if len(prog.Refusals) > 0 {
					ids := make([]string, len(prog.Refusals))
					for i, id := range prog.Refusals {
						ids[i] = strconv.FormatInt(id, 10)
					}
					fmt.Fprintf(out, "refused: %s\n", strings.Join(ids, " "))
				}
			}
			if len(q.IDs) == 0 || prog.Skipped == 0 {
				return nil
			}
			// A redrive by id that skipped some: say which, and fail.
			if len(missing) == 0 {
				return fmt.Errorf("%d of the %d job(s) given were not redriven: they do not exist or are not dead", prog.Skipped, len(q.IDs))
			}
			return fmt.Errorf("not redriven: %s", strings.Join(missing, "; "))
		})(cmd, args)
	}
	f := cmd.Flags()
	f.BoolVar(&allMatching, "all", false, "redrive every dead job matching the filters (with none: every dead job)")
	// The old name, kept for scripts: purge and redrive say --all alike.
	f.BoolVar(&allMatching, "all-matching", false, "deprecated: use --all")
	_ = f.MarkHidden("all-matching")
	addFilterFlags(cmd, &q.Filter)
	f.Float64Var(&q.Rate, "rate", 0, "at most this many jobs per second (0: no bound)")
	f.StringVar(&payload, "payload", "", "replace each job's payload with this JSON")
	f.StringVar(&q.Note, "note", "", "recorded in each job's history (who, why)")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	addConnFlags(cmd, &c)
	return cmd
}

func newPurgeCmd(g *globalOptions) *cobra.Command {
	var (
		c        connOptions
		fo       filterOptions
		all, yes bool
	)
	cmd := &cobra.Command{
		Use:   "purge (filters | --all)",
		Short: "Delete dead jobs",
		Long: `Delete the dead jobs matching the filters, or every dead job with --all.
It asks for confirmation on standard input unless --yes, saying how many dead
jobs match ("Purge 1,234 dead jobs matching queue=mail? [y/N]"); when none
match, it says so and does nothing.
` + bulkHelp + connHelp,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if fo.empty() && !all {
			return flagErrorf(cmd, "no filter given: narrow the purge with filters, or pass --all to purge every dead job")
		}
		if all && !fo.empty() {
			return flagErrorf(cmd, "give filters or --all, not both")
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			matched, err := confirmDLQ(ctx, cmd, b, yes, "Purge", fo)
			if err != nil {
				return err
			}
			if matched == 0 {
				if g.JSON {
					return writeJSON(cmd.OutOrStdout(), map[string]int64{"purged": 0})
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), nothingSelected(fo, "purge"))
				return err
			}
			bar := newProgressBar(cmd, g, "purge")
			n, err := b.Purge(ctx, fo, all, func(p purgeProgress) { bar.update(p.Purged, p.Matched, "") })
			bar.finish()
			if err != nil {
				if n > 0 {
					return fmt.Errorf("purge stopped after deleting %d dead job(s): %w", n, err)
				}
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), map[string]int64{"purged": n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead job(s)\n", n)
			return err
		})(cmd, args)
	}
	addFilterFlags(cmd, &fo)
	cmd.Flags().BoolVar(&all, "all", false, "purge every dead job")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	addConnFlags(cmd, &c)
	return cmd
}

func newExportCmd(g *globalOptions) *cobra.Command {
	var (
		c  connOptions
		fo filterOptions
	)
	cmd := &cobra.Command{
		Use:   "export DIR",
		Short: "Write dead jobs to a folder, one directory per job",
		Long: `Write the dead jobs matching the filters to DIR, one directory per job
named by its id, holding payload.json, error.json and metadata.json. With
--server the jobs come from GET /v1/dlq/export (NDJSON) and the folders are
the same.

A progress bar shows on standard error when it is a terminal (otherwise a
plain line every few seconds, or nothing with --json).
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			bar := newProgressBar(cmd, g, "export")
			n, err := b.Export(ctx, dir, fo, func(n int, total int64) { bar.update(int64(n), total, "") })
			bar.finish()
			if err != nil {
				if n > 0 {
					return fmt.Errorf("export stopped after writing %d dead job(s) to %s: %w", n, dir, err)
				}
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"exported": n, "dir": dir})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "exported %d dead job(s) to %s\n", n, dir)
			return err
		})(cmd, args)
	}
	addFilterFlags(cmd, &fo)
	addConnFlags(cmd, &c)
	return cmd
}

// maxCheckedIDs bounds how many ids a redrive by id looks up first, to
// name those that do not exist or are not dead; beyond it, it counts them.
const maxCheckedIDs = 1000

// checkDeadIDs looks up each id and words each one that is not a dead
// job: "job 99999 not found", "job 5 is not dead (it is pending)".
func checkDeadIDs(ctx context.Context, b backend, ids []int64) ([]string, error) {
	var out []string
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		j, err := b.Get(ctx, id)
		switch {
		case isNotFound(err):
			out = append(out, fmt.Sprintf("job %d not found", id))
		case err != nil:
			return nil, err
		case j.State != redrive.Dead:
			out = append(out, fmt.Sprintf("job %d is not dead (it is %s)", id, j.State))
		}
	}
	return out, nil
}

// errNotConfirmed is the refusal of a destructive operation nobody
// confirmed.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks the question on standard input unless yes. Without a
// terminal on standard input it refuses.
func confirm(cmd *cobra.Command, yes bool, question string) error {
	if yes {
		return nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("%s: standard input is not a terminal, so nobody can confirm; pass --yes to proceed", strings.TrimSuffix(question, "?"))
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		fmt.Fprintln(cmd.ErrOrStderr())
		return fmt.Errorf("%s: no answer on standard input; pass --yes to proceed", strings.TrimSuffix(question, "?"))
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%w: nothing done", errNotConfirmed)
}

// writeTable writes a header and rows as aligned columns.
func writeTable(w io.Writer, header []string, rows func(row func(...any))) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	rows(func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = fmt.Sprint(c)
			if s[i] == "" {
				s[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	})
	return tw.Flush()
}

// writeJobList writes a page of jobs as a table, then summary (how many
// the page shows of how many, when not "") and the next page's cursor.
func writeJobList(out io.Writer, res redrive.ListResult, dead bool, summary string) error {
	if len(res.Jobs) == 0 {
		_, err := fmt.Fprintln(out, "no jobs")
		return err
	}
	var err error
	if dead {
		err = writeTable(out, []string{"ID", "QUEUE", "KIND", "CLASS", "REASON", "DEAD AT", "ERROR"}, func(row func(...any)) {
			for _, j := range res.Jobs {
				row(j.ID, j.Queue, j.Kind, j.LastErrorClass, j.DeadReason, fmtTimePtr(j.DeadAt), oneLine(j.LastError, 60))
			}
		})
	} else {
		err = writeTable(out, []string{"ID", "STATE", "QUEUE", "KIND", "ATTEMPT", "RUN AT", "LAST ERROR"}, func(row func(...any)) {
			for _, j := range res.Jobs {
				row(j.ID, j.State, j.Queue, j.Kind, j.Attempt, fmtTime(j.RunAt), oneLine(j.LastError, 60))
			}
		})
	}
	if err != nil {
		return err
	}
	if summary != "" {
		if _, err := fmt.Fprintln(out, summary); err != nil {
			return err
		}
	}
	if res.Next != "" {
		_, err = fmt.Fprintf(out, "more: --cursor %s\n", res.Next)
	}
	return err
}

func writeJob(out io.Writer, j *redrive.Job) error {
	fs := []field{
		{"id", strconv.FormatInt(j.ID, 10)}, {"state", string(j.State)}, {"queue", j.Queue}, {"kind", j.Kind},
		{"payload", oneLine(string(j.Payload), 200)}, {"attempt", strconv.Itoa(j.Attempt)},
		{"created", fmtTime(j.CreatedAt)}, {"run at", fmtTime(j.RunAt)},
	}
	add := func(name, v string) {
		if v != "" && v != "-" {
			fs = append(fs, field{name, v})
		}
	}
	if j.MaxRetries >= 0 {
		add("max retries", strconv.Itoa(j.MaxRetries))
	}
	add("idempotency key", j.IdempotencyKey)
	add("dependency", j.Dependency)
	if !j.Reprocessable {
		add("reprocessable", "no")
	}
	add("finished", fmtTimePtr(j.FinishedAt))
	add("worker", j.Worker)
	if j.LastError != "" {
		if j.State == redrive.Completed {
			// The job succeeded since: its last error is not a current
			// failure.
			add("failed before success", oneLine(j.LastError, 200))
		} else {
			add("last error", oneLine(j.LastError, 200))
		}
		add("error class", j.LastErrorClass.String())
	}
	add("dead at", fmtTimePtr(j.DeadAt))
	add("dead reason", j.DeadReason)
	add("fingerprint", j.Fingerprint)
	if j.Redriven > 0 {
		add("redriven", strconv.Itoa(j.Redriven))
	}
	if err := writeFields(out, "", fs); err != nil {
		return err
	}
	if len(j.History) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nhistory:")
	return writeTable(out, []string{"  AT", "EVENT", "ATTEMPT", "CLASS", "REASON", "DETAIL"}, func(row func(...any)) {
		for _, e := range j.History {
			detail := e.Error
			if e.Note != "" {
				detail = strings.TrimSpace(detail + " note: " + e.Note)
			}
			if e.PreviousPayload != "" {
				detail = strings.TrimSpace(detail + " previous payload: " + e.PreviousPayload)
			}
			row("  "+fmtTime(e.At), e.Kind, e.Attempt, e.Class, e.Reason, oneLine(detail, 80))
		}
	})
}

func writeStats(out io.Writer, s redrive.Stats) error {
	queues := map[string]bool{}
	for q := range s.Jobs {
		queues[q] = true
	}
	for q := range s.Counters {
		queues[q] = true
	}
	if len(queues) == 0 {
		_, err := fmt.Fprintln(out, "no jobs")
		return err
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	slices.Sort(names)
	states := []redrive.State{redrive.Pending, redrive.Scheduled, redrive.Running, redrive.Completed, redrive.Dead, redrive.Canceled}
	header := []string{"QUEUE"}
	for _, st := range states {
		header = append(header, strings.ToUpper(string(st)))
	}
	if err := writeTable(out, header, func(row func(...any)) {
		for _, q := range names {
			cells := []any{q}
			for _, st := range states {
				cells = append(cells, s.Jobs[q][st])
			}
			row(cells...)
		}
	}); err != nil {
		return err
	}
	fmt.Fprintln(out, "\ncounters:")
	return writeTable(out, []string{"  QUEUE", "COUNTER", "TOTAL"}, func(row func(...any)) {
		for _, q := range names {
			cs := make([]string, 0, len(s.Counters[q]))
			for c := range s.Counters[q] {
				cs = append(cs, c)
			}
			slices.Sort(cs)
			for _, c := range cs {
				row("  "+q, c, s.Counters[q][c])
			}
		}
	})
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// clipArg shortens an argument quoted in an error.
func clipArg(s string) string { return oneLine(s, 64) }
