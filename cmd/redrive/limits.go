package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// newLimitsCmd is `redrive limits`.
func newLimitsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List and set the fleet's concurrency limits",
		Long: `List the fleet-wide concurrency limits with their use, and change a limit's
max at run time.

A concurrency limit lets at most MAX jobs of one group run at once across
every process on the store (serve's concurrency-limits setting, or
redrive.ConcurrencyLimit in Go); a job whose group is full waits without
using an attempt and starts as soon as a slot frees.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLimitsListCmd(g), newLimitSetCmd(g))
	return cmd
}

func newLimitsListCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the concurrency limits with their use now",
		Long: "List every concurrency limit: its max, the jobs running under it (all groups, and the busiest group), and the due jobs waiting.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		ls, err := b.Limits(ctx)
		if err != nil {
			return err
		}
		if ls == nil {
			ls = []store.LimitState{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, server.LimitList{Limits: ls})
		}
		return writeLimits(out, ls)
	})
	addConnFlags(cmd, &c)
	return cmd
}

func newLimitSetCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "set NAME MAX", Short: "Change a concurrency limit's max, fleet-wide",
		Long: `Set the max of the concurrency limit NAME (creating it if there is none), for
every process at its next fetch. A max below the jobs running stops new
starts until enough end; no running job is stopped. MAX is 1 to 1000000.
` + connHelp, Args: cobra.ExactArgs(2)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		max, err := strconv.Atoi(args[1])
		if err != nil || max < 1 || max > store.MaxLimit {
			return flagErrorf(cmd, "MAX must be a whole number from 1 to %d, got %q", store.MaxLimit, args[1])
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			l, err := b.SetLimit(ctx, args[0], max)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, server.LimitBody{Limit: l})
			}
			return writeLimits(out, []store.LimitState{l})
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

func writeLimits(out io.Writer, ls []store.LimitState) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintln(out, "no concurrency limits")
		return err
	}
	return writeTable(out, []string{"LIMIT", "MAX", "IN USE", "BUSIEST GROUP", "GROUPS", "WAITING", "APPLIES TO"}, func(row func(...any)) {
		for _, l := range ls {
			row(l.Name, l.Max, l.InUse, l.Busiest, l.Groups, l.Waiting, limitSelector(l))
		}
	})
}

// limitSelector says which jobs a limit applies to and what makes their
// group, as the process answering is configured ("-" when it is not).
func limitSelector(l store.LimitState) string {
	if !l.Configured {
		return "-"
	}
	var parts []string
	for _, p := range []struct{ k, v string }{{"queue", l.Queue}, {"kind", l.Kind}, {"key", l.Key}} {
		if p.v != "" {
			parts = append(parts, p.k+"="+p.v)
		}
	}
	if len(parts) == 0 {
		return "every job"
	}
	return strings.Join(parts, " ")
}
