package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// newBreakersCmd is `redrive breakers`.
func newBreakersCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "breakers",
		Short: "List the fleet's circuit breakers, force one open, close or delete it",
		Long: `List the circuit breakers that the worker processes sharing the store keep
for their dependencies, force one open, close it, or delete one nothing
uses.

A breaker is shared by every worker on the store: when one process's
failures trip it, every process stops calling the dependency; when its break
ends, one process (fleet-wide) probes the dependency, and its success closes
the breaker for all. Forcing a breaker open or closing it here does the same
for the whole fleet.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBreakersListCmd(g), newBreakerOpenCmd(g), newBreakerCloseCmd(g), newBreakerDeleteCmd(g))
	return cmd
}

// withBreakers runs f on the backend the flags select.
func withBreakers(g *globalOptions, c *connOptions, f func(ctx context.Context, b backend) error) func(*cobra.Command, []string) error {
	return withBackend(g, c, f)
}

func newBreakersListCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the fleet's circuit breakers",
		Long: `List every dependency's circuit breaker as the fleet shares it: its state,
failures within the window (an open breaker counts none: its count restarts
when it trips, so it reads "not counted while open"), trips, who opened it
last and when, when it
lets a probe through (open) or which process holds the probe (half-open).
Over --server, breakers only the server's process has used are listed too,
and FALLBACK says whether that process lost the store and decides alone.
` + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBreakers(g, &c, func(ctx context.Context, b backend) error {
		bs, err := b.Breakers(ctx)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, bs)
		}
		return writeBreakers(out, bs)
	})
	addConnFlags(cmd, &c)
	return cmd
}

func newBreakerOpenCmd(g *globalOptions) *cobra.Command {
	var (
		c   connOptions
		dur time.Duration
	)
	cmd := &cobra.Command{Use: "open NAME", Short: "Force a dependency's breaker open for the whole fleet",
		Long: `Force the circuit breaker of the dependency NAME open: every worker process
on the store stops calling it and defers the jobs that use it, until --for
has elapsed (then one probe goes through, as after a trip) or, without
--for, until ` + "`redrive breakers close NAME`" + `.
` + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := store.CheckName("breaker name", args[0]); err != nil {
			return flagErrorf(cmd, "%s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
		}
		if dur < 0 || dur > server.MaxForcedOpen {
			return flagErrorf(cmd, "--for is %s; it must be positive and at most %s (or 0: until closed)",
				server.FormatDuration(dur), server.FormatDuration(server.MaxForcedOpen))
		}
		return withBreakers(g, &c, func(ctx context.Context, b backend) error {
			v, err := b.ForceBreaker(ctx, args[0], true, dur)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, server.BreakerBody{Breaker: v})
			}
			until := "until `redrive breakers close " + shellQuote(v.Name) + "`"
			if !v.ReadyAt.IsZero() {
				until = "until " + fmtTime(v.ReadyAt)
			}
			_, err = fmt.Fprintf(out, "breaker %s forced open %s: the fleet defers the jobs that use it\n", v.Name, until)
			return err
		})(cmd, args)
	}
	durationFlag(cmd.Flags(), &dur, "for", 0, "how long the breaker stays forced open (e.g. 15m, 7d); 0: until closed")
	addConnFlags(cmd, &c)
	return cmd
}

func newBreakerCloseCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "close NAME", Aliases: []string{"reset"}, Short: "Close a dependency's breaker for the whole fleet",
		Long: `Close the circuit breaker of the dependency NAME and clear the fleet's
counts: every worker process calls the dependency again. Jobs already
deferred run when their deferral ends, at most one break duration later.
` + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := store.CheckBreakerName(args[0]); err != nil {
			return flagErrorf(cmd, "breaker name: %s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
		}
		return withBreakers(g, &c, func(ctx context.Context, b backend) error {
			v, err := b.ForceBreaker(ctx, args[0], false, 0)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, server.BreakerBody{Breaker: v})
			}
			_, err = fmt.Fprintf(out, "breaker %s closed: the fleet calls the dependency again\n", v.Name)
			return err
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

func newBreakerDeleteCmd(g *globalOptions) *cobra.Command {
	var (
		c     connOptions
		force bool
	)
	cmd := &cobra.Command{Use: "rm NAME", Aliases: []string{"delete"}, Short: "Delete a breaker nothing uses",
		Long: `Delete the shared circuit breaker of the dependency NAME, so that it leaves
` + "`breakers ls`" + `, the dashboard and /metrics (a breaker forced open by mistake,
a dependency the fleet no longer calls). Only a breaker nothing uses is
deleted: closed and left alone (no failure reported, no probe, no operator)
for 5 minutes, or for its counting window if longer; open by trips, or
half-open, with no process asking for its probe for that long after its
break (or the probe's lease) ended; or forced open by an operator
(deleting it closes it). A breaker in use is refused, saying why; --force
deletes it anyway
(every process closes its breaker at its next probe, within one break).
A process that uses the dependency again creates the breaker again, closed.
` + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := store.CheckBreakerName(args[0]); err != nil {
			return flagErrorf(cmd, "breaker name: %s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
		}
		return withBreakers(g, &c, func(ctx context.Context, b backend) error {
			if err := b.DeleteBreaker(ctx, args[0], force); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, map[string]string{"deleted": args[0]})
			}
			_, err := fmt.Fprintf(out, "breaker %s deleted\n", args[0])
			return err
		})(cmd, args)
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the breaker even while it is in use (open by trips, half-open, reported on recently)")
	addConnFlags(cmd, &c)
	return cmd
}

// writeBreakers writes the breakers as a table.
func writeBreakers(out io.Writer, bs []server.BreakerView) error {
	if len(bs) == 0 {
		_, err := fmt.Fprintln(out, "No circuit breaker has been used yet.")
		return err
	}
	fallback := false
	for _, b := range bs {
		fallback = fallback || b.Fallback
	}
	header := []string{"BREAKER", "STATE", "FAILURES", "TRIPS", "OPENED BY", "OPENED", "PROBE AT", "PROBE BY", "SHARED"}
	err := writeTable(out, header, func(row func(...any)) {
		for _, b := range bs {
			state := string(must(b.State.MarshalText()))
			if b.Forced {
				state += " (forced)"
			}
			opened := "-"
			if !b.OpenedAt.IsZero() {
				opened = fmtTime(b.OpenedAt)
			}
			probeAt := "-"
			switch {
			case !b.ReadyAt.IsZero():
				probeAt = fmtTime(b.ReadyAt)
			case b.State.String() == store.BreakerOpen:
				probeAt = "when closed"
			}
			shared := "yes"
			if !b.Shared {
				shared = "no (this process only)"
			}
			var failures any = b.Failures
			if s := b.State.String(); s == store.BreakerOpen || s == store.BreakerHalfOpen {
				// Its count restarts when it trips: 0 would misstate it.
				failures = "not counted while open"
			}
			row(b.Name, state, failures, b.Trips, dash(b.OpenedBy), opened, probeAt, dash(b.ProbeBy), shared)
		}
	})
	if err == nil && fallback {
		_, err = fmt.Fprintln(out, "FALLBACK: the server's process lost the store; its breakers decide alone on its own calls")
	}
	return err
}

func must(b []byte, err error) []byte {
	if err != nil {
		return []byte("?")
	}
	return b
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
