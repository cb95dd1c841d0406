package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// newLimitsCmd is `redrive limits`.
func newLimitsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List and set the fleet's concurrency and rate limits",
		Long: `List the fleet-wide limits with their use, and change a limit's max or rate
at run time.

A limit lets at most MAX jobs of one group run at once, and (with a rate)
at most N start per interval, in bursts of up to BURST, across every
process on the store (serve's concurrency-limits setting, or
redrive.ConcurrencyLimit in Go); a job whose group is full, or whose rate
is used up, waits without using an attempt and starts as soon as the
limit allows.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLimitsListCmd(g), newLimitSetCmd(g))
	return cmd
}

func newLimitsListCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the concurrency limits with their use now",
		Long: "List every limit: its max (- for none), its rate and burst, the starts its rate delayed (THROTTLED), the jobs running under it (all groups, and the busiest group), and the due jobs waiting.\n" + connHelp, Args: cobra.NoArgs}
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
	var rate string
	var burst int
	cmd := &cobra.Command{Use: "set NAME [MAX]", Short: "Change a limit's max or rate, fleet-wide",
		Long: `Set the max of the limit NAME, or its rate (--rate, with --burst), or both
(creating the limit if there is none: one created by a rate alone has no
max), for every process at its next fetch. A max below the jobs running
stops new starts until enough end; no running job is stopped. MAX is 1 to
1000000. --rate is N/interval: 50/s, 100/m, 3/1m, 10/1.5s (N from 1 to
1000000, the interval from 1ms to 24h, at most one start a microsecond);
--rate none removes the rate. --burst (1 to 1000000, default 1) is how
many of a group may start at once after a quiet spell. A rate set here
wins over serve's configuration. Every value is checked before anything
is stored.
` + connHelp, Args: cobra.RangeArgs(1, 2)}
	cmd.Flags().StringVar(&rate, "rate", "", "the limit's rate: N/interval (50/s, 3/1m), or none to remove it")
	cmd.Flags().IntVar(&burst, "burst", 0, "how many jobs of a group may start at once (with --rate; default 1)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		max := 0
		if len(args) == 2 {
			var err error
			max, err = strconv.Atoi(args[1])
			if err != nil || max < 1 || max > store.MaxLimit {
				return flagErrorf(cmd, "MAX must be a whole number from 1 to %d, got %q", store.MaxLimit, args[1])
			}
		}
		setRate := cmd.Flags().Changed("rate")
		if cmd.Flags().Changed("burst") && !setRate {
			return flagErrorf(cmd, "--burst goes with --rate")
		}
		if !setRate && max == 0 {
			return flagErrorf(cmd, "give MAX, --rate or both")
		}
		r, err := redrive.ParseRate(rate)
		if err != nil {
			return flagErrorf(cmd, "--rate: %v", strings.TrimPrefix(err.Error(), "rate: "))
		}
		if cmd.Flags().Changed("burst") {
			if r.N == 0 {
				return flagErrorf(cmd, "--burst goes with a rate, not with none")
			}
			if burst < 1 || burst > store.MaxBurst {
				return flagErrorf(cmd, "--burst must be a whole number from 1 to %d, got %d", store.MaxBurst, burst)
			}
			r.Burst = burst
		} else if r.N > 0 {
			r.Burst = 1
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			var l store.LimitState
			var err error
			if max > 0 {
				if l, err = b.SetLimit(ctx, args[0], max); err != nil {
					return err
				}
			}
			if setRate {
				if l, err = b.SetLimitRate(ctx, args[0], r); err != nil {
					return err
				}
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
	return writeTable(out, []string{"LIMIT", "MAX", "RATE", "BURST", "THROTTLED", "IN USE", "BUSIEST GROUP", "GROUPS", "WAITING", "APPLIES TO"}, func(row func(...any)) {
		for _, l := range ls {
			max, rate, burst := any(l.Max), "-", "-"
			if l.Max == 0 {
				max = "-"
			}
			if l.Rate != nil {
				rate, burst = redrive.FormatRate(*l.Rate), strconv.Itoa(l.Rate.Burst)
			}
			row(l.Name, max, rate, burst, l.Throttled, l.InUse, l.Busiest, l.Groups, l.Waiting, limitSelector(l))
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
