package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
)

// newWorkersCmd is `redrive workers`.
func newWorkersCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "workers", Short: "List the worker processes on the store", Args: cobra.NoArgs}
	var c connOptions
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the worker processes registered in the store",
		Long: `List the worker processes registered in the store, the most recently started
first: id, host and PID, state (live; silent: no heartbeat for a minute;
stopped; gone: found gone by a worker on its host, which rescued its jobs at
once), queues and concurrency, running jobs, last heartbeat, version.
Stopped and silent workers are listed for a day.
` + connHelp, Args: cobra.NoArgs}
	ls.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		ws, err := b.Workers(ctx)
		if err != nil {
			return err
		}
		if ws == nil {
			ws = []redrive.WorkerStatus{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, server.WorkerList{Workers: ws})
		}
		return writeWorkers(out, ws)
	})
	addConnFlags(ls, &c)
	cmd.AddCommand(ls)
	return cmd
}

// writeWorkers writes the workers as a table.
func writeWorkers(out io.Writer, ws []redrive.WorkerStatus) error {
	if len(ws) == 0 {
		_, err := fmt.Fprintln(out, "No workers registered.")
		return err
	}
	return writeTable(out, []string{"ID", "HOST", "PID", "STATE", "QUEUES", "KINDS", "RUNNING", "HEARTBEAT", "STARTED", "VERSION"}, func(row func(...any)) {
		for _, w := range ws {
			names := make([]string, 0, len(w.Queues))
			for q := range w.Queues {
				names = append(names, q)
			}
			sort.Strings(names)
			for i, q := range names {
				names[i] = fmt.Sprintf("%s=%d", q, w.Queues[q])
			}
			kinds := strings.Join(w.Kinds, ",")
			switch {
			case w.Kinds == nil:
				kinds = "?" // a worker of a version that did not record them
			case len(w.Kinds) == 0:
				kinds = "-"
			}
			row(w.ID, w.Host, w.PID, w.State, strings.Join(names, ","), kinds, w.Running, fmtTime(w.HeartbeatAt), fmtTime(w.StartedAt), w.Version)
		}
	})
}
