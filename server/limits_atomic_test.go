package server

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestLimitsPutAtomic: PUT /v1/limits/{name} applies its max, rate and
// hold in one transaction of the store. A trigger in the SQLite file
// (another connection, as an operator's or a bug's) makes turning the
// hold on fail, after the max and the rate in the same request: the PUT
// fails and the limit keeps its max and rate (before, the max and rate
// were stored by calls of their own, and only the hold failed).
func TestLimitsPutAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvOn(t, st, Options{})
	e.want(e.do("PUT", "/v1/limits/crm", `{"max":5,"rate":"10/s"}`), 200, nil)

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `CREATE TRIGGER no_hold BEFORE UPDATE OF hold_retry_after ON conc_limits
		WHEN NEW.hold_retry_after = 1 AND OLD.hold_retry_after = 0 BEGIN SELECT RAISE(ABORT, 'hold refused'); END`); err != nil {
		t.Fatal(err)
	}
	r := e.do("PUT", "/v1/limits/crm", `{"max":2,"rate":"1/s","hold_on_retry_after":true}`)
	if r.status == 200 {
		t.Fatalf("PUT with the hold refused = 200: %s", r.body)
	}
	var list LimitList
	e.want(e.do("GET", "/v1/limits", ""), 200, &list)
	if len(list.Limits) != 1 {
		t.Fatalf("limits = %+v, want crm", list.Limits)
	}
	l := list.Limits[0]
	if l.Max != 5 || l.Rate == nil || *l.Rate != (store.LimitRate{N: 10, Per: 1e9, Burst: 1}) || l.HoldOnRetryAfter {
		t.Errorf("after a failed PUT: max %d, rate %v, hold %v; want it unchanged: 5, 10/1s, false", l.Max, l.Rate, l.HoldOnRetryAfter)
	}

	// Without the trigger the same PUT applies all three.
	if _, err := db.ExecContext(t.Context(), `DROP TRIGGER no_hold`); err != nil {
		t.Fatal(err)
	}
	var set LimitBody
	e.want(e.do("PUT", "/v1/limits/crm", `{"max":2,"rate":"1/s","hold_on_retry_after":true}`), 200, &set)
	if l := set.Limit; l.Max != 2 || l.Rate == nil || l.Rate.N != 1 || !l.HoldOnRetryAfter {
		t.Errorf("PUT = %+v, want max 2, rate 1/s, the hold on", l)
	}
}
