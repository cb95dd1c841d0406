// Package testtopics names the Kafka topics a test process makes on a
// real broker, and deletes them, with the consumer groups named after
// them, when the process's tests are done.
//
// A broker of a small machine keeps every partition in memory: topics
// left behind by a few hundred test runs fill its heap, after which its
// controller fences it and every test fails. Each test binary that makes
// topics on a real broker names them with Prefix and calls Delete from
// its TestMain.
package testtopics

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Prefix is the start of the name of every topic and group this process
// makes: "redrive-test-<pid>-". Two test binaries running at once (go
// test runs packages in parallel) never delete each other's topics.
func Prefix() string {
	return fmt.Sprintf("redrive-test-%d-", os.Getpid())
}

// Delete deletes the topics and consumer groups on brokers whose names
// start with Prefix.
func Delete(ctx context.Context, brokers []string) error {
	prefix := Prefix()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
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
		return fmt.Errorf("list topics: %w", err)
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
