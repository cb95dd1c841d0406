package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/retry"
)

// amqpURLEnv is the default of --amqp-url.
const amqpURLEnv = "REDRIVE_AMQP_URL"

const amqpHelp = `
With --amqp-queue NAME the command works on the RabbitMQ dead-letter queue
NAME-dlq of the work queue NAME, on the broker of --amqp-url (default
$` + amqpURLEnv + `), instead of the store's dead jobs.`

// amqpOptions select a RabbitMQ work queue's DLQ.
type amqpOptions struct {
	url, queue, logFormat string
}

// withAMQP adds --amqp-url and --amqp-queue to a dlq subcommand: with
// them, run serves the command on the RabbitMQ DLQ, and the flags in
// allowed are the only others it takes; without, the command works as
// before.
func withAMQP(cmd *cobra.Command, allowed []string,
	run func(ctx context.Context, cmd *cobra.Command, dlq *amqp.DLQ, args []string) error) *cobra.Command {
	var a amqpOptions
	f := cmd.Flags()
	f.StringVar(&a.url, "amqp-url", "", "RabbitMQ URL of --amqp-queue (default $"+amqpURLEnv+")")
	f.StringVar(&a.queue, "amqp-queue", "", "work the RabbitMQ DLQ of this work queue (NAME-dlq) instead of the store's")
	f.StringVar(&a.logFormat, "log-format", "", "with --amqp-queue: format of the connection's logs: text, json, or auto (text on a terminal) ($"+logFormatEnv+")")
	cmd.Long += "\n" + amqpHelp
	dbRun := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if a.queue == "" {
			if a.url != "" {
				return flagErrorf(cmd, "--amqp-url needs --amqp-queue: which work queue's DLQ?")
			}
			return dbRun(cmd, args)
		}
		ok := map[string]bool{"amqp-url": true, "amqp-queue": true, "log-format": true}
		for _, n := range allowed {
			ok[n] = true
		}
		var bad error
		cmd.LocalNonPersistentFlags().VisitAll(func(fl *pflag.Flag) {
			if fl.Changed && !ok[fl.Name] && bad == nil {
				bad = flagErrorf(cmd, "--%s applies to the store's dead jobs, not to a RabbitMQ DLQ (--amqp-queue)", fl.Name)
			}
		})
		if bad != nil {
			return bad
		}
		url := a.url
		if url == "" {
			url = os.Getenv(amqpURLEnv)
		}
		if url == "" {
			return flagErrorf(cmd, "--amqp-queue needs the broker: set --amqp-url or $%s", amqpURLEnv)
		}
		ctx := cmd.Context()
		lf := a.logFormat
		if !cmd.Flags().Changed("log-format") {
			lf = os.Getenv(logFormatEnv)
		}
		format, err := config.ParseLogFormat(lf)
		if err != nil {
			return flagErrorf(cmd, "--log-format %w", err)
		}
		log := slog.New(newLogHandler(cmd.ErrOrStderr(), format, slog.LevelWarn))
		dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		conn, err := amqp.Dial(dialCtx, url, amqp.ConnOptions{Name: "redrive cli", Logger: log,
			Reconnect: &retry.Policy{MaxRetries: 2, Initial: time.Second, Multiplier: 2, MaxDelay: 2 * time.Second}})
		if err != nil {
			return err
		}
		defer conn.Close()
		dlq, err := amqp.NewDLQ(conn, a.queue)
		if err != nil {
			return flagErrorf(cmd, "--amqp-queue: %v", err)
		}
		defer dlq.Close()
		bodies, err := brokerBodies(os.Getenv)
		if err != nil {
			return err
		}
		dlq.SetBodies(bodies)
		return run(ctx, cmd, dlq, args)
	}
	return cmd
}

// amqpList is `dlq ls --amqp-queue`: the messages at the head of the DLQ,
// read without taking them.
func amqpList(g *globalOptions) func(context.Context, *cobra.Command, *amqp.DLQ, []string) error {
	return func(ctx context.Context, cmd *cobra.Command, dlq *amqp.DLQ, _ []string) error {
		limit, _ := cmd.Flags().GetInt("limit")
		if limit == 0 {
			limit = 50
		}
		if limit < 0 || limit > amqp.MaxPeek {
			return flagErrorf(cmd, "--limit must be from 1 to %d", amqp.MaxPeek)
		}
		total, err := dlq.Count(ctx)
		if err != nil {
			return err
		}
		dead, err := dlq.Peek(ctx, limit)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			if dead == nil {
				dead = []amqp.DeadLetter{}
			}
			return writeJSON(out, dead)
		}
		if len(dead) == 0 {
			_, err := fmt.Fprintf(out, "No dead messages in %s.\n", dlq.Name())
			return err
		}
		err = writeTable(out, []string{"MESSAGE ID", "KIND", "REASON", "CLASS", "ATTEMPTS", "DEAD AT", "ERROR"}, func(row func(...any)) {
			for _, d := range dead {
				deadAt := "-"
				if !d.DeadAt.IsZero() {
					deadAt = fmtTime(d.DeadAt)
				}
				reason := d.Reason
				if d.Problem != "" {
					reason += " (unreadable headers)"
				}
				reason += sealedNote(d.Sealed, d.BodyError)
				row(oneLine(d.MessageID, 36), d.Kind, reason, d.Class, d.Attempts, deadAt, oneLine(d.Error, 60))
			}
		})
		if err != nil {
			return err
		}
		if total > len(dead) {
			_, err = fmt.Fprintf(out, "showing the first %d of %s dead messages in %s; --limit shows more (at most %d), --json shows their histories\n",
				len(dead), fmtCount(int64(total)), dlq.Name(), amqp.MaxPeek)
		}
		return err
	}
}

// brokerBodies are the keys that open the sealed bodies of a broker's
// dead letters, from the environment as serve reads them
// ($REDRIVE_PAYLOAD_KEYS_FILE or $REDRIVE_PAYLOAD_KEYS): nil without
// keys, and the bodies then show sealed, as undecryptable.
func brokerBodies(getenv func(string) string) (*redrive.SealedBodies, error) {
	keys, err := config.LoadPayloadKeys(getenv("REDRIVE_PAYLOAD_KEYS_FILE"), getenv("REDRIVE_PAYLOAD_KEYS"))
	if err != nil || keys == nil {
		return nil, err
	}
	return &redrive.SealedBodies{Keys: keys, All: true}, nil
}

// sealedNote is what the REASON column adds for a dead letter whose body
// is sealed: nothing when it opened, else that it did not.
func sealedNote(sealed, bodyErr string) string {
	if sealed == "" || bodyErr == "" {
		return ""
	}
	return " (body sealed under " + sealed + ": undecryptable)"
}

// amqpCount is `dlq count --amqp-queue`.
func amqpCount(g *globalOptions) func(context.Context, *cobra.Command, *amqp.DLQ, []string) error {
	return func(ctx context.Context, cmd *cobra.Command, dlq *amqp.DLQ, _ []string) error {
		n, err := dlq.Count(ctx)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), map[string]int{"count": n})
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
		return err
	}
}

// amqpRedrive is `dlq redrive --amqp-queue (--max N | --all)`.
func amqpRedrive(g *globalOptions) func(context.Context, *cobra.Command, *amqp.DLQ, []string) error {
	return func(ctx context.Context, cmd *cobra.Command, dlq *amqp.DLQ, args []string) error {
		f := cmd.Flags()
		all, _ := f.GetBool("all") // --all-matching, its old name, sets it too
		maxN, _ := f.GetInt("max")
		rate, _ := f.GetFloat64("rate")
		note, _ := f.GetString("note")
		yes, _ := f.GetBool("yes")
		switch {
		case len(args) > 0:
			return flagErrorf(cmd, "a RabbitMQ DLQ has no job ids: redrive --max N messages from its head, or --all")
		case all == (maxN > 0):
			return flagErrorf(cmd, "say how many dead messages to redrive: --max N (from the head of the DLQ) or --all (all)")
		case maxN < 0:
			return flagErrorf(cmd, "--max must be positive")
		case rate < 0:
			return flagErrorf(cmd, "--rate must not be negative")
		}
		audit, err := openBrokerAudit(ctx, g, cmd)
		if err != nil {
			return err
		}
		defer audit.Close()
		n, err := dlq.Count(ctx)
		if err != nil {
			return err
		}
		if maxN > 0 {
			n = min(n, maxN)
		}
		out := cmd.OutOrStdout()
		if n == 0 {
			if g.JSON {
				return writeJSON(out, amqp.RedriveResult{})
			}
			_, err := fmt.Fprintf(out, "No dead messages in %s: nothing to redrive.\n", dlq.Name())
			return err
		}
		if err := confirm(cmd, yes, fmt.Sprintf("Redrive %s dead message(s) from %s back to their work queue?", fmtCount(int64(n)), dlq.Name())); err != nil {
			return err
		}
		if rate == 0 {
			rate = 100
		}
		bar := newProgressBar(cmd, g, "redrive")
		res, err := dlq.Redrive(ctx, amqp.RedriveOptions{Max: n, Rate: rate, Note: note,
			Progress: func(done int) { bar.update(int64(done), int64(n), "") }})
		bar.finish()
		audit.record(cmd, "dlq redrive", map[string]any{"amqp_queue": dlq.Name(), "max": n, "rate": rate},
			int64(res.Redriven), note, err)
		if err != nil {
			return fmt.Errorf("redrive stopped after %d message(s): %w", res.Redriven, err)
		}
		if g.JSON {
			return writeJSON(out, res)
		}
		_, err = fmt.Fprintf(out, "redriven %d message(s) from %s; refused %d (not reprocessable, left in place)\n", res.Redriven, dlq.Name(), res.Refused)
		return err
	}
}

// amqpPurge is `dlq purge --amqp-queue --all`.
func amqpPurge(g *globalOptions) func(context.Context, *cobra.Command, *amqp.DLQ, []string) error {
	return func(ctx context.Context, cmd *cobra.Command, dlq *amqp.DLQ, _ []string) error {
		all, _ := cmd.Flags().GetBool("all")
		yes, _ := cmd.Flags().GetBool("yes")
		if !all {
			return flagErrorf(cmd, "a RabbitMQ DLQ is purged whole: pass --all")
		}
		audit, err := openBrokerAudit(ctx, g, cmd)
		if err != nil {
			return err
		}
		defer audit.Close()
		n, err := dlq.Count(ctx)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if n == 0 {
			if g.JSON {
				return writeJSON(out, map[string]int{"purged": 0})
			}
			_, err := fmt.Fprintf(out, "No dead messages in %s: nothing to purge.\n", dlq.Name())
			return err
		}
		if err := confirm(cmd, yes, fmt.Sprintf("Purge all %s dead message(s) of %s?", fmtCount(int64(n)), dlq.Name())); err != nil {
			return err
		}
		purged, err := dlq.Purge(ctx)
		audit.record(cmd, "dlq purge", map[string]any{"amqp_queue": dlq.Name(), "all": true}, int64(purged), "", err)
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(out, map[string]int{"purged": purged})
		}
		_, err = fmt.Fprintf(out, "purged %d dead message(s) from %s\n", purged, dlq.Name())
		return err
	}
}

// newDLQCountCmd is `redrive dlq count`: how many dead jobs match the
// filters, or how many messages wait in a RabbitMQ DLQ.
func newDLQCountCmd(g *globalOptions) *cobra.Command {
	var (
		c  connOptions
		fo filterOptions
	)
	cmd := &cobra.Command{Use: "count", Short: "Count dead jobs (or a RabbitMQ DLQ's messages)",
		Long: "Count the dead jobs matching the filters.\n" + connHelp, Args: cobra.NoArgs}
	cmd.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		n, err := b.Count(ctx, deadQuery(fo))
		if err != nil {
			return err
		}
		if g.JSON {
			return writeJSON(cmd.OutOrStdout(), map[string]int64{"count": n})
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
		return err
	})
	addFilterFlags(cmd, &fo)
	addConnFlags(cmd, &c)
	return cmd
}

// amqpDLQCommands adds the RabbitMQ mode to the dlq subcommands.
func amqpDLQCommands(g *globalOptions, dlq *cobra.Command) {
	byName := map[string]*cobra.Command{}
	for _, c := range dlq.Commands() {
		byName[c.Name()] = c
	}
	if c := byName["ls"]; c != nil {
		withAMQP(c, []string{"limit"}, amqpList(g))
	}
	if c := byName["redrive"]; c != nil {
		c.Flags().Int("max", 0, "with --amqp-queue: redrive this many messages from the head of the DLQ")
		withAMQP(c, addBrokerAuditFlags(c, []string{"all", "all-matching", "max", "rate", "note", "yes"}), amqpRedrive(g))
	}
	if c := byName["purge"]; c != nil {
		withAMQP(c, addBrokerAuditFlags(c, []string{"all", "yes"}), amqpPurge(g))
	}
	count := newDLQCountCmd(g)
	withAMQP(count, nil, amqpCount(g))
	dlq.AddCommand(count)
}
