package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// errImportRemote is the error of `redrive dlq import` given --server:
// the API has no import route; an import adds jobs to the store.
var errImportRemote = errors.New("redrive dlq import works on the store (--db or --database-url), with the payload keys in " +
	"$REDRIVE_PAYLOAD_KEYS_FILE or $REDRIVE_PAYLOAD_KEYS when the export is sealed, not through --server")

// newImportCmd is `redrive dlq import DIR`: the dead jobs of an export
// folder added to the store.
func newImportCmd(g *globalOptions) *cobra.Command {
	c := connOptions{create: true}
	cmd := &cobra.Command{
		Use:   "import DIR",
		Short: "Add the dead jobs of an export folder to the store",
		Long: `Add the dead jobs of DIR, a folder "redrive dlq export" or an export
operation wrote (one directory per job), to the store as dead jobs with
their errors and history; then list, redrive or purge them as any dead job.
Every job's files are checked first: a folder that is not what an export
writes fails the import, naming it, and nothing is added.

A payload exported sealed ("payload_sealed" in metadata.json) is kept
sealed, in its queue: with its key among the payload keys
($REDRIVE_PAYLOAD_KEYS_FILE, $REDRIVE_PAYLOAD_KEYS) the jobs run with their
plaintext once redriven; without it they are kept, read as undecryptable
(and die as undecryptable if redriven) until the key is configured. An
import is idempotent: jobs with an idempotency key are added once, and
a job without one is given the key redrive-import:DIGEST (of its
exported id, queue, kind, creation and death times), so that importing
the folder again adds nothing.
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		d, ok := b.(*directBackend)
		if !ok {
			return errImportRemote
		}
		dir := cmd.Flags().Arg(0)
		bar := newProgressBar(cmd, g, "import")
		res, err := d.c.Import(ctx, dir, func(n int) { bar.update(int64(n), -1, "") })
		bar.finish()
		if err == nil || res.Imported > 0 {
			d.record(ctx, nil, "dlq import", map[string]any{"dir": dir, "imported": res.Imported, "existing": res.Existing,
				"sealed": res.Sealed, "undecryptable": res.Undecryptable}, int64(res.Imported), "", "")
		}
		if err != nil {
			if res.Imported > 0 {
				return fmt.Errorf("import stopped after adding %d dead job(s): %w", res.Imported, err)
			}
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), res)
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "imported %d dead job(s) from %s (%d already there, %d sealed, %d undecryptable)\n",
			res.Imported, dir, res.Existing, res.Sealed, res.Undecryptable)
		return err
	})
	addConnFlags(cmd, &c)
	return cmd
}
