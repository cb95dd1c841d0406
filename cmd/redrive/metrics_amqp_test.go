package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redrivehq/redrive/amqp"
)

// fixedBrokers is a server.Brokers over a fixed list.
type fixedBrokers []amqp.ManagedQueue

func (f fixedBrokers) ManagedQueues(context.Context) []amqp.ManagedQueue { return f }

// TestRegisterBrokers checks that serve's registry gets the managed
// queues' metrics when there are managed queues, and nothing (and no
// panic) without.
func TestRegisterBrokers(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerBrokers(reg, nil)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("nil brokers: %d series, %v; want none", n, err)
	}
	registerBrokers(reg, fixedBrokers{{Queue: "orders", DeadLetters: "store",
		Queues: []amqp.QueueDepth{{Name: "orders", Role: "work", Messages: 4, Consumers: 2}},
		Router: amqp.RouterStats{Retried: 3, Dead: 1}, Keeper: &amqp.KeeperStats{Kept: 1}}})
	for name, want := range map[string]int{
		"redrive_amqp_queue_messages": 1, "redrive_amqp_queue_consumers": 1, "redrive_amqp_retried_total": 1,
		"redrive_amqp_dead_total": 1, "redrive_amqp_dead_letters_kept_total": 1, "redrive_amqp_up": 1,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d", name, n, err, want)
		}
	}
}
