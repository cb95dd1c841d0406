package main

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestAuditLocal: changes the CLI makes on the store are recorded as
// local, with their target and count; enqueues are not; audit ls lists
// them newest first, filters by action and pages.
func TestAuditLocal(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail")
	mustCLI(t, "--db", db, "queues", "pause", "mail")
	mustCLI(t, "--db", db, "jobs", "cancel", "1")
	l := decode[apiclient.AuditList](t, mustCLI(t, "--db", db, "--json", "audit", "ls"))
	if len(l.Entries) != 2 {
		t.Fatalf("entries: %+v", l.Entries)
	}
	cancel, pause := l.Entries[0], l.Entries[1]
	if cancel.Actor != "local" || cancel.Action != "jobs cancel" || cancel.Target != `{"id":1}` || cancel.Count != 1 {
		t.Errorf("cancel entry: %+v", cancel)
	}
	if pause.Actor != "local" || pause.Action != "queues pause" || !strings.Contains(pause.Target, `"mail"`) || pause.Remote == "" {
		t.Errorf("pause entry: %+v", pause)
	}
	l = decode[apiclient.AuditList](t, mustCLI(t, "--db", db, "--json", "audit", "ls", "--limit", "1"))
	if len(l.Entries) != 1 || l.Next == "" {
		t.Fatalf("page 1: %+v", l)
	}
	l = decode[apiclient.AuditList](t, mustCLI(t, "--db", db, "--json", "audit", "ls", "--limit", "1", "--before", l.Next))
	if len(l.Entries) != 1 || l.Entries[0].ID != pause.ID {
		t.Fatalf("page 2: %+v", l)
	}
	text := mustCLI(t, "--db", db, "audit", "ls", "--action", "queues pause")
	if !strings.Contains(text, "queues pause") || strings.Contains(text, "jobs cancel") {
		t.Errorf("audit ls --action: %s", text)
	}
}
