package kafka_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/kafka"
)

// TestDLTFilteredRedriveTransactionMarkers: in exactly-once mode each
// dead letter of a DLT is followed by its transaction's marker. A
// filtered redrive that skips them all must leave the DLT readable:
// Count, Peek and the next redrive still work and see every skipped dead
// letter. (Each marker after a skipped dead letter was settled as a range
// of its own, unchecked against the cursor's bound: the cursor was
// committed with more ranges than it reads back, and every later Count,
// Peek and Redrive of the DLT failed.)
func TestDLTFilteredRedriveTransactionMarkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	const n = 120
	cl := c.client(t, kgo.TransactionalID(topic+"-eos"))
	for i := range n {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, deadLetter(topic, fmt.Sprint(i), "permanent")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1})
	if err != nil || res.Redriven != 0 || res.Skipped != n {
		t.Fatalf("filtered redrive: %+v %v, want %d skipped", res, err, n)
	}
	if got, err := dlt.Count(ctx); err != nil || got.Total != 2*n || got.Pending < n {
		t.Errorf("count after the filtered redrive: %+v %v, want %d in all, the %d dead letters pending", got, err, 2*n, n)
	}
	if dead, err := dlt.Peek(ctx, 10, nil); err != nil || len(dead) != 10 {
		t.Errorf("peek after the filtered redrive: %d %v, want 10", len(dead), err)
	}
	res, err = dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != n {
		t.Errorf("unfiltered redrive: %+v %v, want the %d skipped", res, err, n)
	}
}
