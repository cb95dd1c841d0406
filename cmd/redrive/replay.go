package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
	"github.com/spf13/cobra"
)

// payloadMatch is the --match flag: payload.FIELD=VALUE.
type payloadMatch struct {
	Field string
	Value json.RawMessage
}

// parsePayloadMatch parses payload.FIELD=VALUE as store.ParsePayloadMatch
// does (the API's match parameter reads it the same way).
func parsePayloadMatch(s string) (payloadMatch, error) {
	field, value, err := store.ParsePayloadMatch(s)
	if err != nil {
		return payloadMatch{}, fmt.Errorf("--match: %s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
	}
	return payloadMatch{Field: field, Value: value}, nil
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
				return flagErrorf(cmd, "--state: unknown state %q (want pending, scheduled, running, completed, dead, canceled or blocked)", s)
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
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (pending, scheduled, running, completed, dead, canceled, blocked)")
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
