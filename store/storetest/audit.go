package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testAudit: entries are appended with increasing IDs and read back as
// written, newest first, filtered by actor, action and time, paged by a
// cursor; bad entries are refused; retention deletes those made before
// its bound and nothing else.
func testAudit(x *h) {
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var want []store.AuditEntry
	for i := range 7 {
		e := store.AuditEntry{At: base.Add(time.Duration(i) * time.Hour), Actor: []string{"alice", "bob"}[i%2], Role: "operate",
			Action: []string{"DELETE /v1/dlq", "POST /v1/dlq/redrive", "dlq purge"}[i%3], Target: fmt.Sprintf(`{"ids":[%d]}`, i),
			Count: int64(i), OperationID: fmt.Sprintf("op-%d", i), Note: "why ✓", Remote: "192.0.2.1:5000", Status: 202}
		got, err := x.s.AppendAudit(x.ctx, e)
		if err != nil {
			x.t.Fatalf("AppendAudit: %v", err)
		}
		if len(want) > 0 && got.ID <= want[len(want)-1].ID {
			x.t.Fatalf("AppendAudit: id %d after %d", got.ID, want[len(want)-1].ID)
		}
		e.ID = got.ID
		want = append(want, e)
	}
	all, next, err := x.s.ListAudit(x.ctx, store.AuditFilter{}, 0, 100)
	if err != nil || next != 0 || len(all) != len(want) {
		x.t.Fatalf("ListAudit: %d entries, next %d, %v", len(all), next, err)
	}
	for i, e := range all {
		w := want[len(want)-1-i]
		if !e.At.Equal(w.At) {
			x.t.Fatalf("entry %d at %v, want %v", e.ID, e.At, w.At)
		}
		e.At = w.At
		if e != w {
			x.t.Fatalf("entry read back as %+v, want %+v", e, w)
		}
	}
	// Paging: 3 at a time, newest first, every entry once.
	var seen []int64
	cursor := int64(0)
	for {
		page, next, err := x.s.ListAudit(x.ctx, store.AuditFilter{}, cursor, 3)
		if err != nil {
			x.t.Fatalf("ListAudit page: %v", err)
		}
		for _, e := range page {
			seen = append(seen, e.ID)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if len(seen) != len(want) || seen[0] != want[len(want)-1].ID || seen[len(seen)-1] != want[0].ID {
		x.t.Fatalf("paged ids %v", seen)
	}
	// Filters.
	for _, c := range []struct {
		f    store.AuditFilter
		want int
	}{
		{store.AuditFilter{Actor: "alice"}, 4},
		{store.AuditFilter{Action: "dlq purge"}, 2},
		{store.AuditFilter{Actor: "bob", Action: "POST /v1/dlq/redrive"}, 1},
		{store.AuditFilter{Since: base.Add(2 * time.Hour)}, 5},
		{store.AuditFilter{Until: base.Add(2 * time.Hour)}, 2},
		{store.AuditFilter{Since: base.Add(time.Hour), Until: base.Add(3 * time.Hour)}, 2},
		{store.AuditFilter{Actor: "nobody"}, 0},
	} {
		got, _, err := x.s.ListAudit(x.ctx, c.f, 0, 100)
		if err != nil || len(got) != c.want {
			x.t.Errorf("ListAudit(%+v): %d entries, %v; want %d", c.f, len(got), err, c.want)
		}
	}
	// Bad entries.
	for _, e := range []store.AuditEntry{{Action: "x"}, {Actor: "x"}, {Actor: "x", Action: "y", Note: "\xff"}} {
		if _, err := x.s.AppendAudit(x.ctx, e); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("AppendAudit(%+v): %v, want ErrInvalid", e, err)
		}
	}
	// A zero At is now.
	now, err := x.s.AppendAudit(x.ctx, store.AuditEntry{Actor: "local", Action: "queues pause"})
	if err != nil || time.Since(now.At) > time.Hour || now.At.IsZero() {
		x.t.Fatalf("AppendAudit without a time: %+v, %v", now, err)
	}
	// Retention.
	n, err := x.s.DeleteAudit(x.ctx, base.Add(3*time.Hour))
	if err != nil || n != 3 {
		x.t.Fatalf("DeleteAudit: %d, %v; want 3", n, err)
	}
	left, _, err := x.s.ListAudit(x.ctx, store.AuditFilter{}, 0, 100)
	if err != nil || len(left) != len(want)-3+1 {
		x.t.Fatalf("after retention: %d entries, %v", len(left), err)
	}
	for _, e := range left {
		if e.At.Before(base.Add(3 * time.Hour)) {
			x.t.Errorf("entry %d of %v survived retention", e.ID, e.At)
		}
	}
}
