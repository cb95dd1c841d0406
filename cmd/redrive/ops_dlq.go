package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/strictjson"
	"github.com/spf13/cobra"
)

func newRedriveCmd(g *globalOptions) *cobra.Command {
	var (
		c                connOptions
		q                redriveQuery
		allMatching, yes bool
		payload          string
	)
	cmd := &cobra.Command{
		Use:   "redrive (ID... | --all [filters])",
		Short: "Move dead jobs back to pending",
		Long: `Redrive dead jobs: by id, or every dead job matching the filters with
--all (with no filter: every dead job; --all-matching is its old name). A
redrive by id that names a job that does not exist or is not dead redrives
the others, then says which and exits with an error. A redrive by filter asks for
confirmation on standard input unless --yes, saying how many dead jobs match
("Redrive 1,234 dead jobs matching queue=mail? [y/N]"); when none match, it
says so and does nothing.
` + bulkHelp + connHelp,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("all-matching") {
			fmt.Fprintln(cmd.ErrOrStderr(), "note: --all-matching is deprecated: use --all")
		}
		switch {
		case len(args) > 0 && allMatching:
			return flagErrorf(cmd, "give job ids or --all, not both")
		case len(args) == 0 && !allMatching:
			return flagErrorf(cmd, "say which dead jobs to redrive: job ids, or --all with filters")
		case len(args) > 0 && !q.Filter.empty():
			return flagErrorf(cmd, "filters apply to --all, not to job ids")
		}
		for _, a := range args {
			id, err := parseID(cmd, a)
			if err != nil {
				return err
			}
			if !slices.Contains(q.IDs, id) {
				q.IDs = append(q.IDs, id)
			}
		}
		if payload != "" {
			if !json.Valid([]byte(payload)) {
				return flagErrorf(cmd, "--payload is not valid JSON: %q", clipArg(payload))
			}
			if err := strictjson.Check([]byte(payload), nil); err != nil {
				return flagErrorf(cmd, "--payload: %v", err)
			}
			q.Payload = json.RawMessage(payload)
		}
		if q.Rate < 0 {
			return flagErrorf(cmd, "--rate must not be negative")
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			out := cmd.OutOrStdout()
			// Which of the ids given cannot be redriven, and why: said
			// after the redrive of the others, which then fails.
			var missing []string
			if len(q.IDs) > 0 && len(q.IDs) <= maxCheckedIDs {
				var err error
				if missing, err = checkDeadIDs(ctx, b, q.IDs); err != nil {
					return err
				}
			}
			if allMatching {
				n, err := confirmDLQ(ctx, cmd, b, yes, "Redrive", q.Filter)
				if err != nil {
					return err
				}
				if n == 0 {
					if g.JSON {
						return writeJSON(out, redrive.RedriveProgress{Done: true})
					}
					_, err := fmt.Fprintln(out, nothingSelected(q.Filter, "redrive"))
					return err
				}
			}
			bar := newProgressBar(cmd, g, "redrive")
			prog, err := b.Redrive(ctx, q, func(p redrive.RedriveProgress) {
				bar.update(p.Redriven+p.Refused+p.Skipped, p.Matched, fmt.Sprintf("refused %d, skipped %d", p.Refused, p.Skipped))
			})
			bar.finish()
			if err != nil {
				if done := prog.Redriven + prog.Refused + prog.Skipped; done > 0 {
					return fmt.Errorf("redrive stopped after redriving %d of %d (refused %d, skipped %d): %w",
						prog.Redriven, prog.Matched, prog.Refused, prog.Skipped, err)
				}
				return err
			}
			if g.JSON {
				if err := writeJSON(out, prog); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "redriven %d of %d matched; refused %d (not reprocessable), skipped %d (gone or not dead)\n",
					prog.Redriven, prog.Matched, prog.Refused, prog.Skipped)
				if prog.Unblocks > 0 {
					fmt.Fprintf(out, "unblocks %d blocked workflow job(s) once the jobs redriven complete\n", prog.Unblocks)
				}
				if len(prog.Refusals) > 0 {
					ids := make([]string, len(prog.Refusals))
					for i, id := range prog.Refusals {
						ids[i] = strconv.FormatInt(id, 10)
					}
					fmt.Fprintf(out, "refused: %s\n", strings.Join(ids, " "))
				}
			}
			if len(q.IDs) == 0 || prog.Skipped == 0 {
				return nil
			}
			// A redrive by id that skipped some: say which, and fail.
			if len(missing) == 0 {
				return fmt.Errorf("%d of the %d job(s) given were not redriven: they do not exist or are not dead", prog.Skipped, len(q.IDs))
			}
			return fmt.Errorf("not redriven: %s", strings.Join(missing, "; "))
		})(cmd, args)
	}
	f := cmd.Flags()
	f.BoolVar(&allMatching, "all", false, "redrive every dead job matching the filters (with none: every dead job)")
	// The old name, kept for scripts: purge and redrive say --all alike.
	f.BoolVar(&allMatching, "all-matching", false, "deprecated: use --all")
	_ = f.MarkHidden("all-matching")
	addFilterFlags(cmd, &q.Filter)
	f.Float64Var(&q.Rate, "rate", 0, "at most this many jobs per second (0: no bound)")
	f.StringVar(&payload, "payload", "", "replace each job's payload with this JSON")
	f.StringVar(&q.Note, "note", "", "recorded in each job's history (who, why)")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	addConnFlags(cmd, &c)
	return cmd
}

func newPurgeCmd(g *globalOptions) *cobra.Command {
	var (
		c        connOptions
		fo       filterOptions
		all, yes bool
	)
	cmd := &cobra.Command{
		Use:   "purge (ID... | filters | --all [filters])",
		Short: "Delete dead jobs",
		Long: `Delete dead jobs: by id, or those matching the filters, or with --all every
dead job (matching the filters, if any: --all selects as dlq redrive --all
does). A purge by filter asks for confirmation on standard input unless
--yes, saying how many dead jobs match ("Purge 1,234 dead jobs matching
queue=mail? [y/N]"); when none match, it says so and does nothing. A purge by
id asks nothing (as dlq redrive ID... does): it deletes the dead jobs named,
then, if any id is not a dead job, says which and exits with an error.
` + bulkHelp + connHelp,
		Args: cobra.ArbitraryArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			if all || !fo.empty() {
				return flagErrorf(cmd, "give job ids, or filters (and --all), not both")
			}
			var ids []int64
			for _, a := range args {
				id, err := parseID(cmd, a)
				if err != nil {
					return err
				}
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			return withBackend(g, &c, func(ctx context.Context, b backend) error {
				return purgeIDs(ctx, cmd, g, b, ids)
			})(cmd, args)
		}
		if fo.empty() && !all {
			return flagErrorf(cmd, "no filter given: name job ids, narrow the purge with filters, or pass --all to purge every dead job")
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			matched, err := confirmDLQ(ctx, cmd, b, yes, "Purge", fo)
			if err != nil {
				return err
			}
			if matched == 0 {
				if g.JSON {
					return writeJSON(cmd.OutOrStdout(), map[string]int64{"purged": 0})
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), nothingSelected(fo, "purge"))
				return err
			}
			bar := newProgressBar(cmd, g, "purge")
			n, err := b.Purge(ctx, fo, all, func(p purgeProgress) { bar.update(p.Purged, p.Matched, "") })
			bar.finish()
			if err != nil {
				if n > 0 {
					return fmt.Errorf("purge stopped after deleting %d dead job(s): %w", n, err)
				}
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), map[string]int64{"purged": n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead job(s)\n", n)
			return err
		})(cmd, args)
	}
	addFilterFlags(cmd, &fo)
	cmd.Flags().BoolVar(&all, "all", false, "purge every dead job matching the filters (with none: every dead job)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	addConnFlags(cmd, &c)
	return cmd
}

// purgeIDs purges the dead jobs among ids and prints how many; ids that
// are not dead jobs are named after, as an error.
func purgeIDs(ctx context.Context, cmd *cobra.Command, g *globalOptions, b backend, ids []int64) error {
	var missing []string
	if len(ids) <= maxCheckedIDs {
		var err error
		if missing, err = checkDeadIDs(ctx, b, ids); err != nil {
			return err
		}
	}
	n, err := b.PurgeIDs(ctx, ids)
	if err != nil {
		if n > 0 {
			return fmt.Errorf("purge stopped after deleting %d dead job(s): %w", n, err)
		}
		return err
	}
	out := cmd.OutOrStdout()
	if g.JSON {
		if err := writeJSON(out, map[string]int64{"purged": n}); err != nil {
			return err
		}
	} else if _, err := fmt.Fprintf(out, "purged %d dead job(s)\n", n); err != nil {
		return err
	}
	switch {
	case n == int64(len(ids)):
		return nil
	case len(missing) > 0:
		return fmt.Errorf("not purged: %s", strings.Join(missing, "; "))
	default:
		return fmt.Errorf("%d of the %d job(s) given were not purged: they do not exist or are not dead", int64(len(ids))-n, len(ids))
	}
}

func newExportCmd(g *globalOptions) *cobra.Command {
	var (
		c       connOptions
		fo      filterOptions
		decrypt bool
	)
	cmd := &cobra.Command{
		Use:   "export DIR",
		Short: "Write dead jobs to a folder, one directory per job",
		Long: `Write the dead jobs matching the filters to DIR, one directory per job
named by its id, holding payload.json, error.json and metadata.json. With
--server the jobs come from GET /v1/dlq/export (NDJSON) and the folders are
the same.

On a store with payload keys, the payloads of encrypted queues (and those
stored encrypted) are written sealed under the current key, and
metadata.json says so ("payload_sealed": the key id): the folder holds no
plaintext of them, and "redrive dlq import" takes them back. --decrypt
writes them in plaintext: it needs the admin role with --server, and is
recorded in the audit log (as "local" on the store).

A progress bar shows on standard error when it is a terminal (otherwise a
plain line every few seconds, or nothing with --json).
` + connHelp,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			bar := newProgressBar(cmd, g, "export")
			n, err := b.Export(ctx, dir, fo, decrypt, func(n int, total int64) { bar.update(int64(n), total, "") })
			bar.finish()
			if err != nil {
				if n > 0 {
					return fmt.Errorf("export stopped after writing %d dead job(s) to %s: %w", n, dir, err)
				}
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"exported": n, "dir": dir})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "exported %d dead job(s) to %s\n", n, dir)
			return err
		})(cmd, args)
	}
	addFilterFlags(cmd, &fo)
	addConnFlags(cmd, &c)
	cmd.Flags().BoolVar(&decrypt, "decrypt", false, "write encrypted payloads in plaintext (admin role; recorded in the audit log)")
	return cmd
}

// maxCheckedIDs bounds how many ids a redrive by id looks up first, to
// name those that do not exist or are not dead; beyond it, it counts them.
const maxCheckedIDs = 1000

// checkDeadIDs looks up each id and words each one that is not a dead
// job: "job 99999 not found", "job 5 is not dead (it is pending)".
func checkDeadIDs(ctx context.Context, b backend, ids []int64) ([]string, error) {
	var out []string
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		j, err := b.Get(ctx, id)
		switch {
		case isNotFound(err):
			out = append(out, fmt.Sprintf("job %d not found", id))
		case err != nil:
			return nil, err
		case j.State != redrive.Dead:
			out = append(out, fmt.Sprintf("job %d is not dead (it is %s)", id, j.State))
		}
	}
	return out, nil
}

// errNotConfirmed is the refusal of a destructive operation nobody
// confirmed.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks the question on standard input unless yes. Without a
// terminal on standard input it refuses.
func confirm(cmd *cobra.Command, yes bool, question string) error {
	if yes {
		return nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("%s: standard input is not a terminal, so nobody can confirm; pass --yes to proceed", strings.TrimSuffix(question, "?"))
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		fmt.Fprintln(cmd.ErrOrStderr())
		return fmt.Errorf("%s: no answer on standard input; pass --yes to proceed", strings.TrimSuffix(question, "?"))
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%w: nothing done", errNotConfirmed)
}
