package redrive_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
)

// TestJobPolicyJSON: a job's own policy is stored with its durations as
// text (the API shows it as stored), and the worker applies it.
func TestJobPolicyJSON(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	e.worker.HandleFunc("fails", func(context.Context, *redrive.Job) error { return errors.New("503 unavailable") })
	p := retry.Policy{MaxRetries: 1, Initial: 5 * time.Millisecond, Multiplier: 1, MaxDelay: 5 * time.Millisecond}
	j, err := e.client.Enqueue(context.Background(), "fails", nil, redrive.WithPolicy(p))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(j.Policy); !strings.Contains(s, `"initial":"5ms"`) || !strings.Contains(s, `"max_retries":1`) {
		t.Errorf("stored policy %s, want durations as text", s)
	}
	e.start()
	dead := e.waitState(j.ID, redrive.Dead)
	if dead.Attempt != 2 {
		t.Errorf("dead after %d attempts, want 2 (the job's policy: 1 retry)", dead.Attempt)
	}
}
