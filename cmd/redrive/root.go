package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// globalOptions are the root command's persistent flags, shared by every
// subcommand.
type globalOptions struct {
	// DB is the path of the SQLite database.
	DB string
	// JSON asks for JSON output instead of text.
	JSON bool
}

// newRootCmd builds the command tree. Each subcommand's constructor takes
// the global options so that it reads --db and --json after parsing.
func newRootCmd() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "redrive",
		Short: "redrive: a durable job engine where failure is first-class",
		Long: `redrive is a durable job engine: retries with backoff and jitter, classified
errors, Retry-After, circuit breakers and a dead-letter queue you can redrive.

This binary is its command-line tool.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.DB, "db", "redrive.db", "SQLite database file")
	root.PersistentFlags().BoolVar(&g.JSON, "json", false, "write JSON instead of text")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{cmd: cmd, err: err}
	})
	root.AddCommand(
		newPolicyCmd(g),
		newBenchCmd(g),
		newMigrateCmd(g),
		newServeCmd(g),
		newEnqueueCmd(g),
		newDownloadCmd(g),
		newJobsCmd(g),
		newDLQCmd(g),
		newStatsCmd(g),
		newQueuesCmd(g),
		newLimitsCmd(g),
		newWorkersCmd(g),
		newBreakersCmd(g),
		newPeriodicCmd(g),
		newOperationsCmd(g),
		newWorkflowsCmd(g),
		newReplayCmd(g),
		newTokenCmd(g),
		newAuditCmd(g),
		newKeysCmd(g),
		newVersionCmd(),
	)
	markReadOnly(root)
	root.Version = versionString()
	root.SetVersionTemplate("redrive {{.Version}}\n")
	strictGroups(root)
	return root
}

// strictGroups makes every group command (one with subcommands and no
// action of its own, such as jobs or dlq) refuse an unknown subcommand
// or argument with a suggestion, instead of printing its help and
// exiting 0 as cobra does. Alone, a group still prints its help.
func strictGroups(root *cobra.Command) {
	for _, c := range root.Commands() {
		strictGroups(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return &usageError{cmd: cmd, err: errors.New(msg)}
		}
	}
}

// usageError is a mistake on the command line: main adds a pointer to
// the command's help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// flagErrorf returns a usage error of cmd, for flag values that parse but
// make no sense.
func flagErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// run executes the command line args with the given output streams and
// reports any error on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	_, err := root.ExecuteContextC(ctx)
	if err != nil {
		// The engine's errors say "redrive: " themselves: once is enough.
		msg := err.Error()
		for strings.HasPrefix(msg, "redrive: ") {
			msg = strings.TrimPrefix(msg, "redrive: ")
		}
		fmt.Fprintf(stderr, "redrive: %s\n", msg)
		if ue, ok := errors.AsType[*usageError](err); ok {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.cmd.CommandPath())
		}
	}
	return err
}

// readOnlyAnnotation marks a command that only reads the store: directly
// on a SQLite database it opens it read-only (sqlite.Options.ReadOnly),
// so that it works on a read-only copy or mount, migrates nothing and
// takes no lock.
const readOnlyAnnotation = "redrive.read-only"

// readOnlyCommands are the commands that only read the store.
var readOnlyCommands = []string{
	"jobs ls", "jobs show", "dlq ls", "dlq show", "dlq groups", "dlq count", "stats", "queues ls",
	"limits ls", "workers ls", "breakers ls", "periodic ls", "operations ls", "operations show", "audit ls",
	"workflows ls", "workflows show",
}

// markReadOnly annotates root's read-only commands.
func markReadOnly(root *cobra.Command) {
	for _, path := range readOnlyCommands {
		cmd, rest, err := root.Find(strings.Fields(path))
		if err != nil || len(rest) > 0 || cmd == root {
			panic("redrive: no command " + path)
		}
		if cmd.Annotations == nil {
			cmd.Annotations = map[string]string{}
		}
		cmd.Annotations[readOnlyAnnotation] = "true"
	}
}
