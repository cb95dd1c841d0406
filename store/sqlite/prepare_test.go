package sqlite

import (
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestStatementsPreparedOnFirstUse: Open prepares none of the writer's
// statements; a fetch prepares those it runs, once, and later fetches
// reuse them; the polled reads (NextDue, Queues) are prepared once per
// store however many goroutines poll at once.
func TestStatementsPreparedOnFirstUse(t *testing.T) {
	s := openTest(t)
	snapshot := func() (map[string]*sql.Stmt, map[string]*sql.Stmt) {
		s.stmtsMu.Lock()
		defer s.stmtsMu.Unlock()
		w, r := map[string]*sql.Stmt{}, map[string]*sql.Stmt{}
		for k, v := range s.stmts {
			w[k] = v
		}
		for k, v := range s.reads {
			r[k] = v
		}
		return w, r
	}
	if w, r := snapshot(); len(w) != 0 || len(r) != 0 {
		t.Fatalf("after Open: %d write and %d read statements prepared, want none", len(w), len(r))
	}

	now := time.Now()
	enqueueN(t, s, 3, now)
	fetch := func() {
		t.Helper()
		if _, err := s.Fetch(t.Context(), store.FetchParams{Queue: "q", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	fetch()
	first, _ := snapshot()
	for _, name := range []string{"fetchSelect", "fetchLease", "jobCount"} {
		if first[name] == nil {
			t.Fatalf("after an enqueue and a fetch, %s is not prepared: %v", name, keys(first))
		}
	}
	if first["redrive"] != nil || first["bury"] != nil {
		t.Fatalf("statements nothing ran were prepared: %v", keys(first))
	}
	fetch()
	again, _ := snapshot()
	for name, st := range first {
		if again[name] != st {
			t.Fatalf("%s prepared again by the second fetch", name)
		}
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				if _, _, err := s.NextDue(t.Context(), "q"); err != nil {
					t.Error(err)
				}
				if _, err := s.Queues(t.Context()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	_, reads := snapshot()
	if len(reads) != 2 || reads[readNextDue] == nil || reads[readQueues] == nil {
		t.Fatalf("read statements after polling: %v, want %s and %s", keys(reads), readNextDue, readQueues)
	}
	if _, _, err := s.NextDue(t.Context(), "q"); err != nil {
		t.Fatal(err)
	}
	if _, later := snapshot(); later[readNextDue] != reads[readNextDue] {
		t.Fatal("NextDue's statement prepared again")
	}
}

func keys(m map[string]*sql.Stmt) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
