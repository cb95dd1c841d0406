package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/kafka"
)

// TestDLTCountHonoursContextWhileWaiting: a Count (or CountRange) that
// waits for another one reading the DLT through (the first Count of a
// large DLT can take minutes) returns at its context's end, instead of
// waiting for the other one to finish.
func TestDLTCountHonoursContextWhileWaiting(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	release := kafka.HoldCounter(dlt)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	for _, op := range []struct {
		name  string
		count func(ctx context.Context) error
	}{
		{"Count", func(ctx context.Context) error { _, err := dlt.Count(ctx); return err }},
		{"CountRange", func(ctx context.Context) error {
			_, err := dlt.CountRange(ctx, map[int32]int64{0: 0}, nil)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- op.count(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s while another count holds the counter: %v, want the context's deadline", op.name, err)
			}
		case <-time.After(30 * time.Second): // liveness bound
			t.Errorf("%s still waits for the other count, 30s after its context ended", op.name)
			release()
			released = true
			<-done
		}
		cancel()
	}
}
