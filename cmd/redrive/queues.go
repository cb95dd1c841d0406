package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
)

// newQueuesCmd is `redrive queues`.
func newQueuesCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List, pause and resume queues",
		Long: `List queues with their job counts, and pause or resume them.

A paused queue keeps its jobs: workers stop fetching them (a worker in the
process that paused at once, the others within their poll interval, 1s by
default), running jobs finish normally, enqueues are accepted, and nothing
fails. Resume it and its jobs run again. A queue can be paused before it
has any job.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newQueuesListCmd(g), newQueuePauseCmd(g, true), newQueuePauseCmd(g, false))
	return cmd
}

func newQueuesListCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the queues, paused or not, with their jobs per state",
		Long: "List every queue: those with jobs and those ever paused or resumed, with their jobs per state.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		qs, err := b.Queues(ctx)
		if err != nil {
			return err
		}
		if qs == nil {
			qs = []redrive.Queue{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, server.QueueList{Queues: qs})
		}
		return writeQueues(out, qs)
	})
	addConnFlags(cmd, &c)
	return cmd
}

func newQueuePauseCmd(g *globalOptions, pause bool) *cobra.Command {
	var (
		c      connOptions
		create bool
	)
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a queue: workers stop fetching its jobs, nothing is lost",
		Long: `Pause the queue NAME: workers stop fetching its jobs until it is resumed.
Running jobs finish normally; waiting jobs stay pending; enqueues are
accepted. Pausing a paused queue changes nothing. A queue that has no job
and was never paused is refused as a likely typo unless --create: then it
is paused before its first job.
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	if !pause {
		cmd.Use = "resume NAME"
		cmd.Short = "Resume a paused queue: workers fetch its jobs again"
		cmd.Long = `Resume the queue NAME: workers fetch its due jobs again. Resuming a queue
that is not paused changes nothing; a queue that has no job and was never
paused is refused as a likely typo.
` + connHelp
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		if name == "" {
			return flagErrorf(cmd, "the queue name is empty")
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			// An invalid name is left to the store or the API to refuse,
			// with their message.
			if !create && redrive.CheckName("queue", name) == nil {
				if err := checkQueueKnown(ctx, b, name, pause); err != nil {
					return err
				}
			}
			q, err := b.SetPaused(ctx, name, pause)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, server.QueueBody{Queue: q})
			}
			waiting := fmt.Sprintf("%d pending, %d scheduled, %d running", q.Jobs[redrive.Pending], q.Jobs[redrive.Scheduled], q.Jobs[redrive.Running])
			if q.Paused {
				_, err = fmt.Fprintf(out, "queue %s paused since %s: workers fetch none of its jobs until `redrive queues resume %s` (%s)\n",
					q.Name, fmtTimePtr(q.PausedAt), shellQuote(q.Name), waiting)
			} else {
				_, err = fmt.Fprintf(out, "queue %s resumed: workers fetch its jobs (%s)\n", q.Name, waiting)
			}
			return err
		})(cmd, args)
	}
	if pause {
		cmd.Flags().BoolVar(&create, "create", false, "pause the queue even if it has no job yet and was never paused")
	}
	addConnFlags(cmd, &c)
	return cmd
}

// checkQueueKnown refuses a queue that has no job and no pause record:
// pausing or resuming it would create a queue that never goes away.
func checkQueueKnown(ctx context.Context, b backend, name string, pause bool) error {
	qs, err := b.Queues(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, q := range qs {
		if q.Name == name {
			return nil
		}
		names = append(names, q.Name)
	}
	known := "there are no queues"
	if len(names) > 0 {
		known = "known: " + strings.Join(names, ", ")
	}
	if pause {
		return fmt.Errorf("queue %s does not exist: it has no job and was never paused (%s); pass --create to pause it before its first job", shellQuote(name), known)
	}
	return fmt.Errorf("queue %s does not exist: it has no job and was never paused (%s); there is nothing to resume", shellQuote(name), known)
}

// writeQueues writes the queues as a table.
func writeQueues(out io.Writer, qs []redrive.Queue) error {
	if len(qs) == 0 {
		_, err := fmt.Fprintln(out, "no queues")
		return err
	}
	header := []string{"QUEUE", "STATE", "PAUSED SINCE"}
	for _, st := range queueStates {
		header = append(header, strings.ToUpper(string(st)))
	}
	header = append(header, "LATENCY")
	unconsumed := false
	err := writeTable(out, header, func(row func(...any)) {
		for _, q := range qs {
			state := "active"
			switch {
			case q.Paused:
				state = "paused"
			case q.Unconsumed:
				state = "unconsumed"
				unconsumed = true
			}
			cells := []any{q.Name, state, fmtTimePtr(q.PausedAt)}
			for _, st := range queueStates {
				cells = append(cells, q.Jobs[st])
			}
			latency := "-"
			if q.OldestDueAt != nil {
				latency = q.Latency().Round(time.Millisecond).String()
			}
			row(append(cells, latency)...)
		}
	})
	if err == nil && unconsumed {
		_, err = fmt.Fprintln(out, "unconsumed: due jobs wait and no live worker serves the queue (start serve with --queues NAME=N)")
	}
	for _, q := range qs {
		if err != nil || q.Fair == nil {
			continue
		}
		line := fmt.Sprintf("fair: %s starts its jobs by round robin over %s", q.Name, q.Fair.Key)
		if len(q.Fair.Weights) > 0 {
			var ws []string
			for _, k := range slices.Sorted(maps.Keys(q.Fair.Weights)) {
				ws = append(ws, fmt.Sprintf("%s=%d", k, q.Fair.Weights[k]))
			}
			line += " (weights " + strings.Join(ws, ", ") + "; others 1)"
		}
		_, err = fmt.Fprintln(out, line)
	}
	return err
}

// queueStates are the job states in lifecycle order, the columns of
// `queues ls`.
var queueStates = []redrive.State{redrive.Pending, redrive.Scheduled, redrive.Running, redrive.Completed, redrive.Dead, redrive.Canceled}

// shellQuote quotes a queue name for a command line shown to the user.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
