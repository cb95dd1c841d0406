package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

const workflowsHelp = `
A workflow is a set of jobs enqueued as a whole, some waiting (blocked, no
attempt used) until the jobs they name in "after" completed, with callbacks
on success, on complete and on death; its on_dead policy says what becomes
of a dead job's dependents: wait (until it is redriven and completes),
cancel, or run anyway. See docs/workflows.md.
`

// maxWorkflowFile bounds the workflow file `workflows enqueue` reads.
const maxWorkflowFile = 16 << 20

// newWorkflowsCmd is `redrive workflows`.
func newWorkflowsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "workflows",
		Aliases: []string{"workflow", "wf"},
		Short:   "Enqueue, list, show, add to and cancel workflows",
		Long:    "Enqueue a workflow from a JSON file, list workflows, show one with its jobs' states, add jobs to an open one, cancel one.\n" + workflowsHelp,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newWorkflowsListCmd(g), newWorkflowShowCmd(g), newWorkflowCancelCmd(g), newWorkflowEnqueueCmd(g), newWorkflowAddCmd(g))
	return cmd
}

func newWorkflowsListCmd(g *globalOptions) *cobra.Command {
	var (
		c      connOptions
		limit  int
		before int64
	)
	cmd := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List workflows, newest first",
		Long: "List workflows, newest first, with their states and progress. When more remain, the last line gives the --before of the next page.\n" + connHelp,
		Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		if limit < 0 || limit > store.MaxPageSize {
			return flagErrorf(cmd, "--limit must be from 1 to %d", store.MaxPageSize)
		}
		if before < 0 {
			return flagErrorf(cmd, "--before must be a workflow id (a positive integer), got %d", before)
		}
		ws, next, err := b.Workflows(ctx, before, limit)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			l := server.WorkflowList{Workflows: ws}
			if l.Workflows == nil {
				l.Workflows = []*redrive.WorkflowInfo{}
			}
			if next != 0 {
				l.Next = strconv.FormatInt(next, 10)
			}
			return writeJSON(out, l)
		}
		if len(ws) == 0 {
			_, err := fmt.Fprintln(out, "no workflows")
			return err
		}
		err = writeTable(out, []string{"ID", "NAME", "STATE", "ON DEAD", "COMPLETED", "DEAD", "CANCELED", "BLOCKED", "CREATED"}, func(row func(...any)) {
			for _, w := range ws {
				row(w.ID, oneLine(w.Name, 40), w.State, w.OnDead, fmt.Sprintf("%d/%d", w.Completed, w.Total), w.Dead, w.Canceled,
					w.Counts[store.Blocked], fmtTime(w.CreatedAt))
			}
		})
		if err != nil {
			return err
		}
		if next != 0 {
			_, err = fmt.Fprintf(out, "more: --before %d\n", next)
		}
		return err
	})
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 0, fmt.Sprintf("workflows per page (default %d, at most %d)", store.DefaultPageSize, store.MaxPageSize))
	f.Int64Var(&before, "before", 0, "the next page: the workflow id the previous page printed")
	addConnFlags(cmd, &c)
	return cmd
}

// parseWorkflowID checks a workflow id argument.
func parseWorkflowID(cmd *cobra.Command, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, flagErrorf(cmd, "workflow id must be a positive integer, got %q", clipArg(s))
	}
	return id, nil
}

// onWorkflowID completes cmd, a workflows subcommand on the workflow whose
// id is its one argument: it checks the id, opens the backend (with the
// connection flags it adds) and calls run.
func onWorkflowID(g *globalOptions, cmd *cobra.Command, run func(ctx context.Context, b backend, id int64) error) *cobra.Command {
	var c connOptions
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseWorkflowID(cmd, args[0])
		if err != nil {
			return err
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error { return run(ctx, b, id) })(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

func newWorkflowShowCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "show ID", Short: "Show a workflow with its jobs' states",
		Long: "Show a workflow: its state, policy, counts and callbacks, then each job with its state and the jobs it waits for.\n" + connHelp,
		Args: cobra.ExactArgs(1)}
	return onWorkflowID(g, cmd, func(ctx context.Context, b backend, id int64) error {
		w, err := b.Workflow(ctx, id)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), w)
		}
		return writeWorkflow(cmd.OutOrStdout(), w)
	})
}

func newWorkflowCancelCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "cancel ID", Short: "Cancel a workflow: its waiting jobs, callbacks, and running jobs",
		Long: `Cancel the workflow ID: its callbacks not fired and its waiting jobs (blocked,
pending, scheduled) are canceled, and its running jobs are asked to stop;
its dead jobs stay in the DLQ. Canceling it again cancels only the jobs
redriven since.
` + connHelp,
		Args: cobra.ExactArgs(1)}
	return onWorkflowID(g, cmd, func(ctx context.Context, b backend, id int64) error {
		w, err := b.CancelWorkflow(ctx, id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, w)
		}
		_, err = fmt.Fprintf(out, "workflow %d canceled: %d of its %d jobs canceled", w.ID, w.Canceled, w.Total)
		if err != nil {
			return err
		}
		if n := w.Counts[redrive.Running]; n > 0 {
			_, err = fmt.Fprintf(out, ", %d running asked to stop", n)
		}
		if err == nil {
			_, err = fmt.Fprintln(out)
		}
		return err
	})
}

func newWorkflowEnqueueCmd(g *globalOptions) *cobra.Command {
	c := connOptions{create: true}
	cmd := &cobra.Command{Use: "enqueue FILE", Short: "Enqueue a workflow declared in a JSON file",
		Long: `Enqueue the workflow declared in FILE ("-": standard input), as POST
/v1/workflows takes it, atomically:

  {"name": "order 1042", "idempotency_key": "order-1042", "on_dead": "wait",
   "jobs": [{"name": "charge", "kind": "charge", "payload": {"order": 1042}},
            {"name": "ship", "kind": "ship", "after": ["charge"]}],
   "on_success": {"kind": "email", "payload": {"to": "ada@example.com"}}}

Each job takes the fields of an enqueue (kind, payload, queue, run_at, delay,
max_retries, dependency, not_reprocessable, priority) but an idempotency key:
the workflow's makes the whole enqueue happen once. The file is read as
strictly as the API reads a body (no unknown or duplicate key); a cycle, a
name in "after" that names no job, a name used twice are refused, naming
them, and nothing is enqueued.

A file holding {"workflows": [WORKFLOW, ...]} enqueues them all at once, as
POST /v1/workflows/batch takes them (up to 1000, 10,000 jobs together), in
one transaction: all of them or none, a refusal naming the workflow
(workflows[i]). A workflow whose key is held, or taken by an earlier
workflow of the file, is answered by the workflow holding it.
` + workflowsHelp + connHelp,
		Args: cobra.ExactArgs(1)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		raw, err := readWorkflowFile(cmd, args[0])
		if err != nil {
			return err
		}
		if isWorkflowBatch(raw) {
			return enqueueWorkflowBatch(cmd, g, &c, args[0], raw)
		}
		in, err := server.DecodeWorkflow(raw, time.Now())
		if err != nil {
			return fmt.Errorf("%s: %w", workflowSource(args[0]), err)
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			w, err := b.EnqueueWorkflow(ctx, in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, w)
			}
			if w.Existing {
				_, err = fmt.Fprintf(out, "workflow %d holds the idempotency key %q: nothing enqueued (it is %s)\n", w.ID, w.IdempotencyKey, w.State)
				return err
			}
			due := w.Total - w.Counts[store.Blocked]
			_, err = fmt.Fprintf(out, "enqueued workflow %d: %d job(s), %d due, %d waiting for others; on_dead %s\n", w.ID, w.Total, due, w.Counts[store.Blocked], w.OnDead)
			return err
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

// isWorkflowBatch reports whether raw, a workflow file, is an object
// with a "workflows" key: many workflows to enqueue at once.
func isWorkflowBatch(raw []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return false // the strict decoding says what is wrong
	}
	_, ok := top["workflows"]
	return ok
}

// enqueueWorkflowBatch is `workflows enqueue` of a file holding many
// workflows.
func enqueueWorkflowBatch(cmd *cobra.Command, g *globalOptions, c *connOptions, name string, raw []byte) error {
	in, err := server.DecodeWorkflows(raw, time.Now())
	if err != nil {
		return fmt.Errorf("%s: %w", workflowSource(name), err)
	}
	return withBackend(g, c, func(ctx context.Context, b backend) error {
		ws, err := b.EnqueueWorkflows(ctx, in)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, server.WorkflowBatch{Workflows: ws})
		}
		created, jobs := 0, int64(0)
		for _, w := range ws {
			if !w.Existing {
				created++
				jobs += w.Total
			}
		}
		_, err = fmt.Fprintf(out, "enqueued %d of %d workflow(s), %d job(s); %d answered by the workflow holding their idempotency key\n",
			created, len(ws), jobs, len(ws)-created)
		return err
	})(cmd, nil)
}

func newWorkflowAddCmd(g *globalOptions) *cobra.Command {
	var c connOptions
	cmd := &cobra.Command{Use: "add ID FILE", Short: "Add jobs from a JSON file to an open workflow",
		Long: `Add the jobs in FILE ("-": standard input) to the workflow ID while it is
open, as POST /v1/workflows/{id}/jobs takes them, atomically:

  {"jobs": [{"name": "page-2", "kind": "fetch", "payload": {"page": 2}},
            {"name": "merge", "kind": "merge", "after": ["page-1", "page-2"]}]}

Each job is named (a name no job of the workflow has) and may wait for jobs
of the file and for members of the workflow ("after"): a member that
completed holds it back no longer. The workflow's callbacks wait for the
jobs added. A workflow is open until it is canceled or every job of it
finished once (its complete callback fired); a closed or canceled
workflow, a name taken, a name in "after" naming no job, a cycle, or a
dependency on a canceled member are refused, naming them, and nothing is
added.
` + workflowsHelp + connHelp,
		Args: cobra.ExactArgs(2)}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseWorkflowID(cmd, args[0])
		if err != nil {
			return err
		}
		raw, err := readWorkflowFile(cmd, args[1])
		if err != nil {
			return err
		}
		in, err := server.DecodeWorkflowAdd(raw, time.Now())
		if err != nil {
			return fmt.Errorf("%s: %w", workflowSource(args[1]), err)
		}
		return withBackend(g, &c, func(ctx context.Context, b backend) error {
			w, err := b.AddToWorkflow(ctx, id, in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, w)
			}
			added := map[string]bool{}
			for _, j := range in.Jobs {
				added[j.Name] = true
			}
			var blocked int
			for _, j := range w.Jobs {
				if added[j.Name] && j.State == store.Blocked {
					blocked++
				}
			}
			_, err = fmt.Fprintf(out, "added %d job(s) to workflow %d: %d due, %d waiting for others; %d job(s) in all\n",
				len(in.Jobs), w.ID, len(in.Jobs)-blocked, blocked, w.Total)
			return err
		})(cmd, args)
	}
	addConnFlags(cmd, &c)
	return cmd
}

// workflowSource names the workflow file in messages.
func workflowSource(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// readWorkflowFile reads the workflow file name ("-": standard input), at
// most maxWorkflowFile bytes.
func readWorkflowFile(cmd *cobra.Command, name string) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = cmd.InOrStdin()
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxWorkflowFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", workflowSource(name), err)
	}
	if len(raw) > maxWorkflowFile {
		return nil, fmt.Errorf("%s: larger than %d MiB", workflowSource(name), maxWorkflowFile>>20)
	}
	return raw, nil
}

// writeWorkflow prints a workflow, one field a line, then its jobs.
func writeWorkflow(out io.Writer, w *redrive.WorkflowInfo) error {
	fs := []field{{"id", strconv.FormatInt(w.ID, 10)}}
	add := func(name, v string) {
		if v != "" {
			fs = append(fs, field{name, v})
		}
	}
	add("name", oneLine(w.Name, store.MaxNodeName))
	add("state", string(w.State))
	add("on dead", string(w.OnDead))
	add("idempotency key", oneLine(w.IdempotencyKey, 1000))
	add("created", fmtTime(w.CreatedAt))
	add("canceled", fmtTimePtr(w.CanceledAt))
	add("closed", fmtTimePtr(w.ClosedAt))
	add("progress", fmt.Sprintf("%d/%d completed, %d dead, %d canceled", w.Completed, w.Total, w.Dead, w.Canceled))
	var counts []string
	for _, st := range append(slices.Clone(store.States), store.Blocked) {
		if n := w.Counts[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", st, n))
		}
	}
	add("jobs by state", strings.Join(counts, ", "))
	for _, cb := range []struct {
		name string
		id   int64
	}{{"on success", w.OnSuccess}, {"on complete", w.OnComplete}, {"on death", w.OnDeath}} {
		if cb.id != 0 {
			add(cb.name, "job "+strconv.FormatInt(cb.id, 10))
		}
	}
	if err := writeFields(out, "", fs); err != nil {
		return err
	}
	if len(w.Jobs) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	names := make(map[int64]string, len(w.Jobs))
	for _, j := range w.Jobs {
		names[j.JobID] = j.Name
	}
	return writeTable(out, []string{"NAME", "JOB", "KIND", "STATE", "AFTER"}, func(row func(...any)) {
		for _, j := range w.Jobs {
			after := make([]string, len(j.After))
			for i, id := range j.After {
				after[i] = names[id]
				if after[i] == "" {
					after[i] = "job " + strconv.FormatInt(id, 10)
				}
			}
			row(oneLine(j.Name, 40), j.JobID, j.Kind, j.State, oneLine(strings.Join(after, ", "), 80))
		}
	})
}

// workflowError words a store error about workflow id as the API does.
func workflowError(id int64, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &jobErr{msg: fmt.Sprintf("workflow %d not found", id), err: err}
	}
	return err
}
