package postgres_test

import (
	"testing"

	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestAddDeadChunked runs the conformance cases of AddDead with calls cut
// into statements of 3 jobs (in one transaction), so that a key repeated
// across statements of a call, a key taken found by a later statement
// and the counts of several statements are covered without calls of
// 10,000 jobs.
func TestAddDeadChunked(t *testing.T) {
	restore := postgres.SetDeadChunk(3)
	t.Cleanup(restore)
	u := withDefaultIsolation(t, "repeatable read")
	storetest.RunNamed(t, conformanceStore(u), "AddDeadFields", "AddDeadInvalid", "AddDeadIdempotency", "AddDeadConcurrent", "AddDeadKeysModel", "AddDeadRedrive",
		"DeadCountsModel", "DeadPagesFilters")
}
