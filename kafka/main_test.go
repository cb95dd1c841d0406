package kafka_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine started by them is
// still running once they are done: whatever a test started (a worker, a
// consumer, a store) must stop when it is closed.
//
// One goroutine of kfake itself is ignored: when a cluster is closed
// while one of its control functions (a test's fault hook) still runs,
// the goroutine running the hook waits forever for the cluster's control
// lock, which its stopped run loop keeps. It belongs to the fake broker,
// not to redrive, and only the kfake tests can start it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).runControl.func1"))
}
