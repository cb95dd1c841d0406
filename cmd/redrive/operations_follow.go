package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/redrivehq/redrive/server"
	"github.com/spf13/cobra"
)

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
