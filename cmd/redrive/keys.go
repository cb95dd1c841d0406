package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// errKeysRemote is the error of `redrive keys` given --server: rotation
// and counts need the store and the keys.
var errKeysRemote = errors.New("redrive keys works on the store (--db or --database-url) with the payload keys in " +
	"$REDRIVE_PAYLOAD_KEYS_FILE or $REDRIVE_PAYLOAD_KEYS, not through --server")

// newKeysCmd is `redrive keys`: payload encryption keys.
func newKeysCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Payload encryption keys: new, count, rotate", Args: cobra.NoArgs}

	newKey := &cobra.Command{Use: "new ID", Short: "Print a new random payload key line (id:base64key)", Args: cobra.ExactArgs(1),
		Long: `Print a new random 32-byte AES-256 payload key as a line of a key file,
"ID:base64key". Put it at the top of the key file (the first key is the
current one), keep the old keys below it, restart serve, then run
"redrive keys rotate".`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := seal.NewKeyring(args[0], map[string][]byte{args[0]: make([]byte, seal.KeySize)}); err != nil {
				return flagErrorf(cmd, "%v", err)
			}
			key := make([]byte, seal.KeySize)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s:%s\n", args[0], base64.StdEncoding.EncodeToString(key))
			return err
		}}

	var c connOptions
	count := &cobra.Command{Use: "count", Short: "Count the stored payloads by the key they are sealed under", Args: cobra.NoArgs}
	count.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		d, ok := b.(*directBackend)
		if !ok {
			return errKeysRemote
		}
		counts, err := keyCounts(ctx, d)
		if err != nil {
			return err
		}
		return printKeyCounts(count, g, counts)
	})
	addConnFlags(count, &c)

	var (
		rc     connOptions
		batch  int
		yes    bool
		detach bool
	)
	rotate := &cobra.Command{Use: "rotate", Short: "Re-seal every payload under the current key (a durable operation)", Args: cobra.NoArgs,
		Long: `Re-seal, under the current payload key (the first of the key list), every
stored payload sealed under another key, whatever its job's state, in a
durable operation: batches of --batch jobs, each in one transaction with
the operation's cursor, so that a rotation killed midway continues where
it stopped (run it again, or let a worker of redrive serve take it over).
Its progress shows in "redrive operations ls" and GET /v1/operations.
When it is done and "redrive keys count" shows no payload under an old
key, remove that key from the key list.`}
	rotate.RunE = withBackend(g, &rc, func(ctx context.Context, b backend) error {
		d, ok := b.(*directBackend)
		if !ok {
			return errKeysRemote
		}
		if batch < 0 || batch > store.MaxPageSize {
			return flagErrorf(rotate, "--batch must be from 1 to %d", store.MaxPageSize)
		}
		if _, ok := d.c.Store().(store.PayloadKeyCounter); !ok {
			return errors.New("this store does not count payload keys")
		}
		counts, err := keyCounts(ctx, d)
		if err != nil {
			return err
		}
		if err := printKeyCounts(rotate, g, counts); err != nil {
			return err
		}
		if err := confirm(rotate, yes, "Re-seal every payload under an old key with the current key?"); err != nil {
			return err
		}
		op, err := startDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationRekey, Batch: batch, Note: "keys rotate"})
		if err != nil {
			return err
		}
		if detach {
			if g.JSON {
				return writeJSON(rotate.OutOrStdout(), op)
			}
			_, err := fmt.Fprintf(rotate.OutOrStdout(), "operation %s started (follow it: redrive operations follow %s)\n", op.ID, op.ID)
			return err
		}
		if err := followAndReport(ctx, rotate, g, b, op, false); err != nil {
			return err
		}
		counts, err = keyCounts(ctx, d)
		if err != nil {
			return err
		}
		return printKeyCounts(rotate, g, counts)
	})
	f := rotate.Flags()
	f.IntVar(&batch, "batch", 0, fmt.Sprintf("jobs per batch, each in one transaction (default %d)", redrive.DefaultOperationBatch))
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&detach, "detach", false, "start the rotation and return: a worker of redrive serve runs it")
	addConnFlags(rotate, &rc)

	cmd.AddCommand(newKey, count, rotate)
	return cmd
}

// keyCounts counts the payloads of the store by key id, and checks the
// keys configured: a rotation without keys would fail every batch.
func keyCounts(ctx context.Context, d *directBackend) (map[string]int64, error) {
	kc, ok := d.c.Store().(store.PayloadKeyCounter)
	if !ok {
		return nil, errors.New("this store does not count payload keys")
	}
	return kc.PayloadKeyCounts(ctx)
}

// printKeyCounts prints counts: one line per key id ("(not sealed)" for
// plaintext payloads), or a JSON object with --json.
func printKeyCounts(cmd *cobra.Command, g *globalOptions, counts map[string]int64) error {
	if g.JSON {
		return writeJSON(cmd.OutOrStdout(), counts)
	}
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var sb strings.Builder
	for _, id := range ids {
		name := id
		if name == "" {
			name = "(not sealed)"
		}
		fmt.Fprintf(&sb, "%-20s %s\n", name, fmtCount(counts[id]))
	}
	if len(ids) == 0 {
		sb.WriteString("no jobs\n")
	}
	_, err := fmt.Fprint(cmd.OutOrStdout(), sb.String())
	return err
}
