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
	var rate, hold string
	var burst int
	cmd := &cobra.Command{Use: "set NAME [MAX|none]", Short: "Change a limit's max, rate or hold on Retry-After, fleet-wide",
		Long: `Set the max of the limit NAME, its rate (--rate, with --burst), its hold on
Retry-After (--hold), or several (creating the limit if there is none: one
created by a rate alone has no max), for every process at its next fetch.
A max below the jobs running stops new starts until enough end; no running
job is stopped. MAX is 1 to 1000000, or none to remove the cap of a limit
that keeps a rate. --rate is N/interval: 50/s, 100/m, 3/1m, 10/1.5s (N
from 1 to 1000000, the interval from 1ms to 24h, at most one start a
microsecond); --rate none removes the rate (of a limit that keeps a max: a
limit needs a max or a rate). --burst (1 to 1000000) is how many of a group
may start at once after a quiet spell; without it a new rate keeps the
limit's burst (1 for a limit that had no rate). --hold on makes a
rate_limited failure with a Retry-After (an HTTP 429 or 503) of one of the
limit's jobs hold the job's group, fleet-wide, until the Retry-After has
passed; --hold off turns that off and ends the limit's holds. A value set
here wins over serve's configuration. Every value is checked before
anything is stored.
` + connHelp, Args: cobra.RangeArgs(1, 2)}
	cmd.Flags().StringVar(&rate, "rate", "", "the limit's rate: N/interval (50/s, 3/1m), or none to remove it")
	cmd.Flags().IntVar(&burst, "burst", 0, "how many jobs of a group may start at once (with --rate; default: the limit's, 1 for a new rate)")
	cmd.Flags().StringVar(&hold, "hold", "", "on: a 429 with Retry-After holds the job's group until then; off: no hold (ends the holds)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		max, setMax := 0, len(args) == 2
		if setMax && args[1] != "none" {
			var err error
			max, err = strconv.Atoi(args[1])
			if err != nil || max < 1 || max > store.MaxLimit {
				return flagErrorf(cmd, "MAX must be a whole number from 1 to %d, or none for no cap (with a rate), got %q", store.MaxLimit, args[1])
			}
		}
		setRate, setHold := cmd.Flags().Changed("rate"), cmd.Flags().Changed("hold")
		if cmd.Flags().Changed("burst") && !setRate {
			return flagErrorf(cmd, "--burst goes with --rate")
		}
		if !setRate && !setMax && !setHold {
			return flagErrorf(cmd, "give MAX, --rate, --hold or several")
		}
		var holdOn bool
		if setHold {
			switch hold {
			case "on":
				holdOn = true
			case "off":
			default:
				return flagErrorf(cmd, "--hold must be on or off, got %q", hold)
			}
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
		}
		if setMax && max == 0 && setRate && r.N == 0 {
			return flagErrorf(cmd, "MAX none and --rate none would leave the limit no limit: keep a max or a rate")
		}
		// One change, applied by the store in one transaction: all of it
		// or none.
		var ch store.LimitChange
		if setMax {
			ch.Max = &max
		}
		if setRate {
			ch.Rate = &r
		}
		if setHold {
			ch.Hold = &holdOn
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			l, err := b.ChangeLimit(ctx, args[0], ch)
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
	return writeTable(out, []string{"LIMIT", "MAX", "RATE", "BURST", "THROTTLED", "IN USE", "BUSIEST GROUP", "GROUPS", "WAITING", "HOLD", "APPLIES TO"}, func(row func(...any)) {
		for _, l := range ls {
			max, rate, burst := any(l.Max), "-", "-"
			if l.Max == 0 {
				max = "-"
			}
			if l.Rate != nil {
				rate, burst = redrive.FormatRate(*l.Rate), strconv.Itoa(l.Rate.Burst)
			}
			row(l.Name, max, rate, burst, l.Throttled, l.InUse, l.Busiest, l.Groups, l.Waiting, limitHold(l), limitSelector(l))
		}
	})
}

// limitHold says whether a limit holds on Retry-After and which groups it
// holds now: "-" (off), "on", or "on: 2 held (a until 15:04:05, ...)".
func limitHold(l store.LimitState) string {
	if !l.HoldOnRetryAfter && l.HeldGroups == 0 {
		return "-"
	}
	s := "off"
	if l.HoldOnRetryAfter {
		s = "on"
	}
	if l.HeldGroups == 0 {
		return s
	}
	var parts []string
	for i, h := range l.Holds {
		if i == 3 {
			parts = append(parts, "...")
			break
		}
		k := h.Key
		if k == "" {
			k = `""`
		}
		parts = append(parts, k+" until "+h.Until.Local().Format("15:04:05"))
	}
	return fmt.Sprintf("%s: %d held (%s)", s, l.HeldGroups, strings.Join(parts, ", "))
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
