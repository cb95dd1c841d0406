package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
		if err := deleteTestTopics(strings.Split(b, ",")); err != nil {
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

// deleteTestTopics deletes the topics this test process made (newTopic's
// prefix) and the groups named after them.
func deleteTestTopics(brokers []string) error {
	prefix := fmt.Sprintf("redrive-test-%d-", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if groups, err := adm.ListGroups(ctx); err == nil {
		var mine []string
		for _, g := range groups.Groups() {
			if strings.HasPrefix(g, prefix) {
				mine = append(mine, g)
			}
		}
		if len(mine) > 0 {
			_, _ = adm.DeleteGroups(ctx, mine...)
		}
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var mine []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			mine = append(mine, name)
		}
	}
	for len(mine) > 0 {
		n := min(len(mine), 500)
		if _, err := adm.DeleteTopics(ctx, mine[:n]...); err != nil {
			return fmt.Errorf("delete %d topics: %w", n, err)
		}
		mine = mine[n:]
	}
	return nil
}
