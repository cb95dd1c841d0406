package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/store"
)

// The audit of the broker DLQ commands: `dlq redrive|purge --amqp-queue`
// and `dlq redrive --kafka-topic` change a broker, not the store, yet
// like every other destructive command they are recorded in the store's
// audit log, as local from this host: the store is the one the usual
// flags name (--db, default redrive.db, or --database-url). A command
// that cannot open that store refuses before it touches the broker,
// unless --no-audit says to go on without an entry (said on standard
// error). The CLI does not record through a server (--server): the API
// takes no audit entry from a client.

// noAuditFlag is the flag with which a broker DLQ command proceeds
// without an audit entry.
const noAuditFlag = "no-audit"

// addBrokerAuditFlags adds --no-audit to a broker DLQ command, and names
// the flags it takes for its audit entry (the store's, --no-audit) in
// allowed.
func addBrokerAuditFlags(cmd *cobra.Command, allowed []string) []string {
	if cmd.Flags().Lookup(noAuditFlag) == nil {
		cmd.Flags().Bool(noAuditFlag, false, "with --amqp-queue or --kafka-topic: change the broker's DLQ without recording it in the store's audit log (by default the command refuses when it cannot record it)")
		// The store's own command (no broker flag) records always.
		storeRun := cmd.RunE
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed(noAuditFlag) {
				return flagErrorf(cmd, "--%s applies to a broker's DLQ (--amqp-queue, --kafka-topic): a change to the store's dead jobs is always recorded", noAuditFlag)
			}
			return storeRun(cmd, args)
		}
	}
	return append(allowed, "database-url", "schema", noAuditFlag)
}

// brokerAudit records a broker DLQ command's change; a nil one records
// nothing (--no-audit).
type brokerAudit struct {
	d *directBackend
}

// openBrokerAudit opens the store of cmd's flags for the audit entry of
// a broker DLQ command; with --no-audit it returns nil. It refuses
// (an error naming --no-audit) when the store cannot be opened.
func openBrokerAudit(ctx context.Context, g *globalOptions, cmd *cobra.Command) (*brokerAudit, error) {
	if no, _ := cmd.Flags().GetBool(noAuditFlag); no {
		fmt.Fprintln(cmd.ErrOrStderr(), "redrive: --no-audit: this change is not recorded in the audit log")
		return nil, nil
	}
	var c connOptions
	f := cmd.Flags()
	c.DatabaseURL, _ = f.GetString("database-url")
	if c.Schema, _ = f.GetString("schema"); c.Schema == "" {
		return nil, flagErrorf(cmd, "--schema must not be empty")
	}
	if cmd.Flags().Lookup("server") == nil {
		// openBackend reads --server and --token: the command has them
		// (the store's redrive and purge), withAMQP refuses them.
		return nil, fmt.Errorf("internal: %s has no connection flags", cmd.CommandPath())
	}
	b, err := openBackend(ctx, g, cmd, &c)
	if err != nil {
		return nil, fmt.Errorf("this change is recorded in the store's audit log, and the store cannot be opened: %w (give --db or --database-url, or --%s to proceed without an audit entry)", err, noAuditFlag)
	}
	d, ok := b.(*directBackend)
	if !ok {
		b.Close()
		return nil, fmt.Errorf("this change is recorded in the store's audit log, and $%s names a server, whose API takes no audit entry from the CLI: give --db or --database-url, or --%s to proceed without an audit entry", serverEnv, noAuditFlag)
	}
	return &brokerAudit{d: d}, nil
}

// record appends the change (action, on target, count of messages
// affected, the note) to the audit log; failed says the change stopped
// midway (the count is what was done). A failure to record is said on
// standard error: the change is made.
func (a *brokerAudit) record(cmd *cobra.Command, action string, target map[string]any, count int64, note string, failed error) {
	if a == nil {
		return
	}
	if failed != nil {
		target["stopped"] = failed.Error()
	}
	t, _ := json.Marshal(target)
	host, _ := os.Hostname()
	e := store.AuditEntry{Actor: localActor, Action: action, Target: store.TruncateUTF8(string(t), store.MaxAuditTarget),
		Count: count, Note: store.TruncateUTF8(note, 1000), Remote: store.TruncateUTF8(host, 200)}
	if _, err := a.d.c.Store().AppendAudit(context.WithoutCancel(cmd.Context()), e); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "redrive: the change was made but not recorded in the audit log: %v\n", err)
	}
}

// Close closes the audit's store.
func (a *brokerAudit) Close() error {
	if a == nil {
		return nil
	}
	return a.d.Close()
}
