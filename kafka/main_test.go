package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testtopics"
	"go.uber.org/goleak"
)

// TestMain runs the package's tests, then deletes the topics and groups
// they made on a real broker, and fails them if a goroutine started by
// them is still running once they are done: whatever a test started (a
// worker, a consumer, a store) must stop when it is closed.
//
// The topics go at the end of the run rather than with each test: a
// broker of a small machine keeps every partition in memory, and the
// topics of a few hundred runs of one test (-count) filled its heap, after
// which its controller fenced it and every test failed.
//
// One goroutine of kfake itself is ignored: when a cluster is closed
// while one of its control functions (a test's fault hook) still runs,
// the goroutine running the hook waits forever for the cluster's control
// lock, which its stopped run loop keeps. It belongs to the fake broker,
// not to redrive, and only the kfake tests can start it.
func TestMain(m *testing.M) {
	code := m.Run()
	if b := os.Getenv(brokersEnv); b != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := testtopics.Delete(ctx, strings.Split(b, ","))
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "kafka tests: deleting their topics: %v\n", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).runControl.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
