package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// newRunNowCmd is `redrive jobs run ID`.
func newRunNowCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "run ID", Short: "Run a scheduled job now (a delayed job, or a retry)",
		Long: `Run a scheduled job now: a job enqueued with a delay, or waiting for its
next retry, becomes pending and due at once. It uses no attempt: its
attempt count, retry count and history are kept. A pending job is left
as it is; a running or finished job is refused.
` + connHelp, Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(cmd, args[0])
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			j, err := b.RunNow(ctx, id)
			if err != nil {
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), j)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "job %d: %s, due now (attempt %d so far)\n", j.ID, j.State, j.Attempt)
			return err
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}
