package redrive_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine started by them is
// still running once they are done: whatever a test started (a worker, a
// consumer, a store) must stop when it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
