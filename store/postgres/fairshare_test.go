package postgres_test

import (
	"testing"

	"github.com/redrivehq/redrive/store/storetest"
)

// TestFairTwoProcesses: a store that never enqueued to a fair queue, nor
// was told it is fair, leases its jobs by round robin (it finds the fair
// jobs by its probe).
func TestFairTwoProcesses(t *testing.T) {
	a := openFresh(t)
	b := open(t, a.Schema())
	defer b.Close()
	storetest.FairTwoProcesses(t, a, b)
}
