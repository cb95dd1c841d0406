package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

const operationsHelp = `
Bulk redrives, purges, replays and folder exports are durable operations
kept in the store, with their progress and a cursor: the worker that leads
the fleet (redrive serve runs one) runs them, and one that dies midway is
continued where it stopped by the next, never handling a job twice.
Directly on the store (without --server), a command that follows an
operation runs it itself when no worker holds it.
`

// newOperationsCmd is `redrive operations`.
func newOperationsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "operations",
		Aliases: []string{"ops"},
		Short:   "List, follow, pause, resume and cancel durable operations",
		Long:    "List, follow, pause, resume and cancel operations (replays, bulk redrives, purges, exports).\n" + operationsHelp,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newOperationsListCmd(g), newOperationShowCmd(g), newOperationFollowCmd(g),
		newOperationSetCmd(g, "pause", "Pause an operation: its runner stops after its current batch"),
		newOperationSetCmd(g, "resume", "Resume a paused operation where it stopped"),
		newOperationSetCmd(g, "cancel", "Cancel an operation for good: what it did stays done"))
	return cmd
}

func newOperationsListCmd(g *globalOptions) *cobra.Command {
	var (
		c      connOptions
		limit  int
		before string
	)
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List operations, newest first",
		Long: "List operations, newest first. When more remain, the last line gives the --before of the next page.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		if limit < 0 || limit > store.MaxPageSize {
			return flagErrorf(cmd, "--limit must be from 1 to %d", store.MaxPageSize)
		}
		if before != "" && !store.ValidOperationID(before) {
			return flagErrorf(cmd, "--before must be an operation id (op_ and 24 hexadecimal digits), got %q", clipArg(before))
		}
		ops, next, err := b.Operations(ctx, before, limit)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			body := map[string]any{"operations": ops}
			if next != "" {
				body["next"] = next
			}
			return writeJSON(out, body)
		}
		if len(ops) == 0 {
			_, err := fmt.Fprintln(out, "no operations")
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tSTATE\tPROGRESS\tSTARTED\tNOTE")
		for _, op := range ops {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.ID, op.Kind, op.State, progressText(op), fmtTime(op.StartedAt), op.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if next != "" {
			_, err = fmt.Fprintf(out, "more: --before %s\n", next)
		}
		return err
	})
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 0, fmt.Sprintf("operations per page (default %d, at most %d)", store.DefaultPageSize, store.MaxPageSize))
	f.StringVar(&before, "before", "", "the next page: the operation id the previous page printed")
	addConnFlags(cmd, &c)
	return cmd
}

// progressText words an operation's progress: "420/1000 (redriven 418, refused 2)".
func progressText(op server.Operation) string {
	total := fmt.Sprint(op.Matched)
	if op.State == server.OperationPending && op.Matched == 0 && op.Processed == 0 {
		total = "?"
	}
	s := fmt.Sprintf("%d/%s", op.Processed, total)
	if d := outcomeText(op); d != "" {
		s += " (" + d + ")"
	}
	return s
}

// outcomeText lists the outcomes counted so far: "redriven 418, refused 2".
func outcomeText(op server.Operation) string {
	var parts []string
	for _, p := range []struct {
		name string
		n    int64
	}{{"replayed", op.Replayed}, {"redriven", op.Redriven}, {"refused", op.Refused}, {"skipped", op.Skipped},
		{"purged", op.Purged}, {"exported", op.Exported}, {"failed", op.Failed}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p.name, p.n))
		}
	}
	return strings.Join(parts, ", ")
}

// parseOperationID checks an operation id argument.
func parseOperationID(cmd *cobra.Command, s string) (string, error) {
	if !store.ValidOperationID(s) {
		return "", flagErrorf(cmd, "operation id must be op_ and 24 hexadecimal digits, got %q", clipArg(s))
	}
	return s, nil
}

// onOperationID completes cmd, an operations subcommand on the operation
// whose id is its one argument: it checks the id, opens the backend (with
// the connection flags it adds) and calls run.
func onOperationID(g *globalOptions, cmd *cobra.Command, run func(ctx context.Context, b backend, id string) error) *cobra.Command {
	var c connOptions
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseOperationID(cmd, args[0])
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error { return run(ctx, b, id) })(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

func newOperationShowCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "show ID", Short: "Show an operation", Long: "Show an operation: its state, selection and progress.\n" + connHelp,
		Args: cobra.ExactArgs(1)}
	return onOperationID(g, cmd, func(ctx context.Context, b backend, id string) error {
		op, err := b.Operation(ctx, id)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), op)
		}
		return writeOperation(cmd.OutOrStdout(), op)
	})
}

// writeOperation prints an operation, one field a line.
func writeOperation(w io.Writer, op server.Operation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("id", op.ID)
	line("kind", string(op.Kind))
	line("state", string(op.State))
	line("progress", progressText(op))
	line("selection", string(op.Filter))
	line("batch", strconv.Itoa(op.Batch))
	if op.Rate > 0 {
		line("rate", fmt.Sprintf("%g jobs/s", op.Rate))
	}
	line("note", op.Note)
	line("folder", op.Dir)
	line("cursor", strconv.FormatInt(op.Cursor, 10))
	line("worker", op.Worker)
	line("error", op.Error)
	line("started", fmtTime(op.StartedAt))
	if op.RunAt != nil {
		line("first run", fmtTime(*op.RunAt))
	}
	line("updated", fmtTime(op.UpdatedAt))
	if op.FinishedAt != nil {
		line("finished", fmtTime(*op.FinishedAt))
	}
	if len(op.RefusedIDs) > 0 {
		ids := make([]string, len(op.RefusedIDs))
		for i, id := range op.RefusedIDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		line("refused ids", strings.Join(ids, " "))
	}
	return tw.Flush()
}

func newOperationSetCmd(g *globalOptions, action, short string) *cobra.Command {
	cmd := &cobra.Command{Use: action + " ID", Short: short, Long: short + ".\n" + connHelp, Args: cobra.ExactArgs(1)}
	return onOperationID(g, cmd, func(ctx context.Context, b backend, id string) error {
		op, err := b.SetOperation(ctx, id, action)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), op)
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "operation %s is %s: %s\n", op.ID, op.State, progressText(op))
		return err
	})
}

func newOperationFollowCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "follow ID", Short: "Show an operation's progress until it ends",
		Long: `Show an operation's progress bar until it ends (done, failed or canceled);
exit with an error unless it is done. Ctrl-C stops following; the operation
goes on.
` + operationsHelp + connHelp, Args: cobra.ExactArgs(1)}
	return onOperationID(g, cmd, func(ctx context.Context, b backend, id string) error {
		op, err := b.Operation(ctx, id)
		if err != nil {
			return err
		}
		return followAndReport(ctx, cmd, g, b, op, false)
	})
}

// followAndReport follows op with a progress bar, then prints its final
// state. cancelOnStop cancels it when ctx ends (Ctrl-C) first.
func followAndReport(ctx context.Context, cmd *cobra.Command, g *globalOptions, b backend, op server.Operation, cancelOnStop bool) error {
	bar := newProgressBar(cmd, g, string(op.Kind))
	final, err := b.Follow(ctx, op, cancelOnStop, func(o server.Operation) {
		total := o.Matched
		if o.State == server.OperationPending && o.Matched == 0 {
			total = -1
		}
		detail := outcomeText(o)
		if o.State != server.OperationRunning {
			detail = strings.TrimPrefix(detail+", "+string(o.State), ", ")
		}
		bar.update(o.Processed, total, detail)
	})
	bar.finish()
	out := cmd.OutOrStdout()
	if g.JSON {
		if werr := writeJSON(out, final); werr != nil {
			return werr
		}
	} else if final.ID != "" {
		fmt.Fprintf(out, "operation %s %s: %s\n", final.ID, final.State, progressText(final))
	}
	if err != nil {
		return err
	}
	switch final.State {
	case server.OperationDone:
		return nil
	case server.OperationFailed:
		return fmt.Errorf("operation %s failed: %s", final.ID, final.Error)
	}
	return fmt.Errorf("operation %s is %s", final.ID, final.State)
}

// payloadMatch is the --match flag: payload.FIELD=VALUE.
type payloadMatch struct {
	Field string
	Value json.RawMessage
}

// parsePayloadMatch parses payload.FIELD=VALUE: FIELD a dotted path of
// object keys, VALUE a JSON string, number, boolean or null, or else
// taken as a string (payload.status=failed).
func parsePayloadMatch(s string) (payloadMatch, error) {
	rest, ok := strings.CutPrefix(s, "payload.")
	if !ok {
		return payloadMatch{}, fmt.Errorf("--match must be payload.FIELD=VALUE (e.g. payload.customer_id=42), got %q", clipArg(s))
	}
	field, value, ok := strings.Cut(rest, "=")
	if !ok {
		return payloadMatch{}, fmt.Errorf("--match %q has no =VALUE (e.g. payload.customer_id=42)", clipArg(s))
	}
	if _, err := store.PayloadPath(field); err != nil {
		return payloadMatch{}, fmt.Errorf("--match: field %q: each key is a letter or _ then letters, digits, _ or - (at most 8 keys)", clipArg(field))
	}
	raw := json.RawMessage(value)
	if store.CheckPayloadMatch(redrive.Filter{PayloadField: field, PayloadValue: raw}) != nil {
		// Not a JSON scalar: the text itself, as a JSON string.
		b, err := json.Marshal(value)
		if err != nil {
			return payloadMatch{}, fmt.Errorf("--match: value %q: %w", clipArg(value), err)
		}
		raw = b
	}
	return payloadMatch{Field: field, Value: raw}, nil
}

// newReplayCmd is `redrive replay`.
func newReplayCmd(g *globalOptions) *cobra.Command {
	var (
		c          connOptions
		fo         filterOptions
		states     []string
		match      string
		batch      int
		rate       float64
		note       string
		all, yes   bool
		detach     bool
		matchParse payloadMatch
	)
	cmd := &cobra.Command{
		Use:   "replay [filters] (--all to replay every job)",
		Short: "Enqueue again, as new jobs, the jobs matching filters",
		Long: `Replay jobs: enqueue, as new jobs, copies of the jobs matching the filters,
whatever their state (--state completed,dead to choose; none: every state),
optionally only those whose payload holds a value (--match
payload.customer_id=42). Each new job names the job it replays (replay_of,
and a replayed event in its history). The replay works in batches
(--batch, default 100) in id order, at most --rate jobs a second, as a
durable operation: see redrive operations.

It asks for confirmation on standard input unless --yes, saying how many
jobs match. --since and --until bound the time each job finished
(completed, dead, canceled) or was created (the others).
` + operationsHelp + bulkHelp + connHelp,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if match != "" {
			var err error
			if matchParse, err = parsePayloadMatch(match); err != nil {
				return flagErrorf(cmd, "%v", err)
			}
		}
		if fo.empty() && len(states) == 0 && match == "" && !all {
			return flagErrorf(cmd, "say which jobs to replay: filters, or --all for every job")
		}
		if batch < 0 || batch > store.MaxPageSize {
			return flagErrorf(cmd, "--batch must be from 1 to %d", store.MaxPageSize)
		}
		if rate < 0 {
			return flagErrorf(cmd, "--rate must not be negative")
		}
		var sts []redrive.State
		for _, s := range states {
			st, err := store.ParseState(s)
			if err != nil {
				return flagErrorf(cmd, "--state: unknown state %q (want pending, scheduled, running, completed, dead or canceled)", s)
			}
			sts = append(sts, st)
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			f, err := fo.toFilter()
			if err != nil {
				return flagErrorf(cmd, "%v", err)
			}
			f.States, f.PayloadField, f.PayloadValue = sts, matchParse.Field, matchParse.Value
			q := replayQuery{Flags: fo, States: states, Match: matchParse, Filter: f, All: all, Batch: batch, Rate: rate, Note: note}
			n, err := b.CountReplay(ctx, q)
			if err != nil {
				return err
			}
			if n == 0 {
				if g.JSON {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"replayed": 0})
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no job matches: nothing to replay")
				return err
			}
			question := "Replay the jobs matching the filters?"
			if n > 0 {
				question = fmt.Sprintf("Replay %s matching jobs as new jobs?", fmtCount(n))
			}
			if err := confirm(cmd, yes, question); err != nil {
				return err
			}
			op, err := b.StartReplay(ctx, q)
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
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (pending, scheduled, running, completed, dead, canceled)")
	f.StringVar(&match, "match", "", "only jobs whose payload holds this value: payload.FIELD=VALUE (e.g. payload.customer_id=42)")
	f.IntVar(&batch, "batch", 0, fmt.Sprintf("jobs per batch, each in one transaction (default %d)", redrive.DefaultOperationBatch))
	f.Float64Var(&rate, "rate", 0, "at most this many jobs per second (0: no bound)")
	f.StringVar(&note, "note", "", "recorded in each new job's history (who, why)")
	f.BoolVar(&all, "all", false, "replay every job when no filter is given")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&detach, "detach", false, "start the replay and return: a worker runs it (follow it with redrive operations follow ID)")
	addConnFlags(cmd, &c)
	return cmd
}
