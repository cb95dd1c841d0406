package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// newPeriodicCmd is `redrive periodic`.
func newPeriodicCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "periodic",
		Aliases: []string{"schedules"},
		Short:   "List, pause, resume, trigger and delete periodic jobs",
		Long: `List the schedules of periodic jobs with their next and last runs, pause and
resume them, run one's job now, and delete those no worker declares any
more.

Schedules are declared by the workers (WorkerOptions.Periodic in Go, the
"schedules" of serve's config file); the store keeps each one's state. A
paused schedule enqueues nothing until resumed, and its occurrences during
the pause never run.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newPeriodicListCmd(g), newPeriodicPauseCmd(g, true), newPeriodicPauseCmd(g, false), newPeriodicTriggerCmd(g), newPeriodicDeleteCmd(g))
	return cmd
}

func newPeriodicListCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the schedules with their next and last runs",
		Long: "List every periodic schedule declared in the store, sorted by name.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		list, err := b.Schedules(ctx)
		if err != nil {
			return err
		}
		if list == nil {
			list = []redrive.ScheduleInfo{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, server.ScheduleList{Schedules: list})
		}
		return writeSchedules(out, list)
	})
	addConnFlags(cmd, &c)
	return cmd
}

func newPeriodicPauseCmd(g *globalOptions, pause bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a schedule: nothing is enqueued for it until resumed",
		Long: `Pause the schedule NAME: no job is enqueued for it until it is resumed, and
its occurrences meanwhile never run. Jobs already enqueued are not
touched. Pausing a paused schedule changes nothing.
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	if !pause {
		cmd.Use = "resume NAME"
		cmd.Short = "Resume a paused schedule from now"
		cmd.Long = `Resume the schedule NAME: its next occurrence after now is the next
enqueued. Resuming a schedule that is not paused changes nothing.
` + connHelp
	}
	return onSchedule(g, cmd, func(ctx context.Context, sb backend, name string, out io.Writer) error {
		s, err := sb.SetSchedulePaused(ctx, name, pause)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(out, server.ScheduleBody{Schedule: s})
		}
		if s.Paused {
			_, err = fmt.Fprintf(out, "schedule %s paused since %s: nothing is enqueued until `redrive periodic resume %s`\n",
				s.Name, fmtTime(s.PausedAt), shellQuote(s.Name))
		} else {
			_, err = fmt.Fprintf(out, "schedule %s resumed: next run %s\n", s.Name, fmtTime(s.NextRun))
		}
		return err
	})
}

func newPeriodicTriggerCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Enqueue one job of a schedule now",
		Long: `Enqueue one job of the schedule NAME now, outside its schedule and whether or
not it is paused. The schedule's next run does not change.
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	return onSchedule(g, cmd, func(ctx context.Context, sb backend, name string, out io.Writer) error {
		j, err := sb.TriggerSchedule(ctx, name)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(out, j)
		}
		_, err = fmt.Fprintf(out, "schedule %s triggered: job %d (kind %s, queue %s)\n", name, j.ID, j.Kind, j.Queue)
		return err
	})
}

func newPeriodicDeleteCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Delete a schedule no worker declares any more",
		Long: `Delete the schedule NAME and its state (paused, last run), say once the
code or the config file that declared it no longer does. A schedule that a
running worker still declares is refused, naming the worker (its host and
pid): deleted, it would be declared again within seconds, as new. Jobs it
enqueued are not touched.
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	return onSchedule(g, cmd, func(ctx context.Context, sb backend, name string, out io.Writer) error {
		if err := sb.DeleteSchedule(ctx, name); err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(out, map[string]string{"deleted": name})
		}
		_, err := fmt.Fprintf(out, "schedule %s deleted\n", name)
		return err
	})
}

// onSchedule completes cmd, a periodic subcommand on the schedule named
// by its one argument: it checks the name, opens the backend (with the
// connection flags it adds) and calls run with the schedules and the
// command's output.
func onSchedule(g *globalOptions, cmd *cobra.Command, run func(ctx context.Context, sb backend, name string, out io.Writer) error) *cobra.Command {
	var c connOptions
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		if name == "" {
			return flagErrorf(cmd, "the schedule name is empty")
		}
		nameErr := store.CheckName("schedule name", name)
		if nameErr != nil && (len(name) > store.MaxNameLength || !utf8.ValidString(name)) {
			return flagErrorf(cmd, "%s", strings.TrimPrefix(nameErr.Error(), store.ErrInvalid.Error()+": "))
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			// A name the rule refuses is taken only when a schedule of
			// that name is stored (from before the rule), so that it
			// can still be paused or removed.
			if nameErr != nil {
				list, err := b.Schedules(ctx)
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(list, func(s redrive.ScheduleInfo) bool { return s.Name == name }) {
					return errors.New(strings.TrimPrefix(nameErr.Error(), store.ErrInvalid.Error()+": "))
				}
			}
			return run(ctx, b, name, cmd.OutOrStdout())
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

// writeSchedules writes the schedules as a table.
func writeSchedules(out io.Writer, list []redrive.ScheduleInfo) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(out, "no schedules")
		return err
	}
	return writeTable(out, []string{"NAME", "SCHEDULE", "KIND", "QUEUE", "STATE", "NEXT RUN", "LAST RUN", "LAST JOB", "MISSED"}, func(row func(...any)) {
		for _, s := range list {
			spec := "every " + s.Every
			if s.Cron != "" {
				spec = s.Cron
				if s.TimeZone != "" {
					spec += " (" + s.TimeZone + ")"
				}
			}
			state := "active"
			if s.Paused {
				state = "paused"
			}
			if s.Error != "" {
				spec, state = "?", "unreadable: "+oneLine(s.Error, 60)
			}
			last := "-"
			if s.LastJobID != 0 {
				last = fmt.Sprint(s.LastJobID)
			}
			row(s.Name, spec, s.Kind, s.Queue, state, fmtTime(s.NextRun), fmtTime(s.LastRun), last, s.Missed)
		}
	})
}
