package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// Audit lists the audit log on the store, as GET /v1/audit does.
func (d *directBackend) Audit(ctx context.Context, q apiclient.AuditQuery) (apiclient.AuditList, error) {
	f := store.AuditFilter{Actor: q.Actor, Action: q.Action}
	now := time.Now()
	for _, t := range []struct {
		flag, v string
		to      *time.Time
	}{{"--since", q.Since, &f.Since}, {"--until", q.Until, &f.Until}} {
		if t.v == "" {
			continue
		}
		v, ok := server.ParseTime(t.v, now)
		if !ok {
			return apiclient.AuditList{}, fmt.Errorf("%s %q: want an RFC 3339 time or a duration ago (30m, 1h, 7d)", t.flag, t.v)
		}
		*t.to = v
	}
	var before int64
	if q.Before != "" {
		var err error
		if before, err = strconv.ParseInt(q.Before, 10, 64); err != nil || before < 1 {
			return apiclient.AuditList{}, fmt.Errorf("--before %q: want an audit entry id", q.Before)
		}
	}
	entries, next, err := d.c.Store().ListAudit(ctx, f, before, q.Limit)
	if err != nil {
		return apiclient.AuditList{}, err
	}
	l := apiclient.AuditList{Entries: entries}
	if next != 0 {
		l.Next = strconv.FormatInt(next, 10)
	}
	return l, nil
}

func newAuditCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Read the audit log of changes", Args: cobra.NoArgs}
	var c connOptions
	var q apiclient.AuditQuery
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the audit log, newest first",
		Long: `List the audit log, newest first: every change made through the API, the
dashboard or this tool on the store (enqueues aside), with who made it (the
token's name; local for this tool on the store; anonymous on a server
without tokens), when, the action, its target, the count it affected or the
operation it started, its note and where it came from. Entries are kept 90
days by default (serve --audit-retention); nothing changes or deletes one.
When more remain, the last line gives the --before of the next page.
` + connHelp, Args: cobra.NoArgs}
	ls.RunE = withBackend(g, &c, func(ctx context.Context, b backend) error {
		if q.Limit < 0 || q.Limit > server.MaxPageSize {
			return flagErrorf(ls, "--limit %d: want 1 to %d", q.Limit, server.MaxPageSize)
		}
		if q.Limit == 0 {
			q.Limit = 100
		}
		l, err := b.Audit(ctx, q)
		if err != nil {
			return err
		}
		if l.Entries == nil {
			l.Entries = []store.AuditEntry{}
		}
		out := cmd.OutOrStdout()
		if g.JSON {
			return writeJSON(out, l)
		}
		return writeAudit(out, l)
	})
	f := ls.Flags()
	f.StringVar(&q.Actor, "actor", "", "only the entries of this actor (a token's name, local or anonymous)")
	f.StringVar(&q.Action, "action", "", `only the entries of this action (e.g. "DELETE /v1/dlq", "dlq purge")`)
	f.StringVar(&q.Since, "since", "", "only entries at or after this time: RFC 3339, or a duration ago (30m, 1h, 7d)")
	f.StringVar(&q.Until, "until", "", "only entries before this time: RFC 3339, or a duration ago")
	f.StringVar(&q.Before, "before", "", "the next page: entries older than this id (given by the previous page)")
	f.IntVar(&q.Limit, "limit", 100, "at most this many entries")
	addConnFlags(ls, &c)
	cmd.AddCommand(ls)
	return cmd
}

// writeAudit writes the audit entries as a table.
func writeAudit(out io.Writer, l apiclient.AuditList) error {
	if len(l.Entries) == 0 {
		_, err := fmt.Fprintln(out, "No audit entries.")
		return err
	}
	err := writeTable(out, []string{"ID", "AT", "ACTOR", "ACTION", "TARGET", "COUNT", "OPERATION", "NOTE", "FROM"}, func(row func(...any)) {
		for _, e := range l.Entries {
			actor := e.Actor
			if e.Role != "" {
				actor += " (" + e.Role + ")"
			}
			row(e.ID, e.At.Local().Format(time.DateTime), actor, e.Action, e.Target, e.Count, e.OperationID, e.Note, e.Remote)
		}
	})
	if err == nil && l.Next != "" {
		_, err = fmt.Fprintf(out, "More: --before %s\n", l.Next)
	}
	return err
}
