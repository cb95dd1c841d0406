package redrive_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store/sqlite"
)

func keyPolicy(t *testing.T, id string, b byte) *seal.Policy {
	t.Helper()
	k, err := seal.ParseKeys([]byte(id + ":" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, seal.KeySize))))
	if err != nil {
		t.Fatal(err)
	}
	return &seal.Policy{Keys: k, All: true}
}

// TestUndecryptableJobDies: jobs sealed under a key the worker's store
// does not have die at their first attempt, class permanent, reason
// undecryptable, without their handler being called; reads show why; a
// job sealed under the store's own key runs with its plaintext.
func TestUndecryptableJobDies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	ctx := context.Background()
	old, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Payloads: keyPolicy(t, "k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	c1 := redrive.NewClient(old, redrive.ClientOptions{Logger: quietLogger()})
	var lost []int64
	for range 3 {
		j, err := c1.Enqueue(ctx, "k", json.RawMessage(`{"secret":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		lost = append(lost, j.ID)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Payloads: keyPolicy(t, "k2", 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger(), Policy: &p, Queues: map[string]int{redrive.DefaultQueue: 2}})
	e := &env{t: t, store: st, client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
	var calls atomic.Int32
	var seen atomic.Value
	w.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		seen.Store(string(j.Payload))
		return nil
	})
	e.start()
	good, err := c.Enqueue(ctx, "k", json.RawMessage(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(good.ID, redrive.Completed)
	if calls.Load() != 1 || seen.Load() != `{"n":1}` {
		t.Fatalf("handler calls %d, saw %v", calls.Load(), seen.Load())
	}
	for _, id := range lost {
		j := e.waitState(id, redrive.Dead)
		if j.DeadReason != redrive.ReasonUndecryptable || j.LastErrorClass != failure.Permanent || j.Attempt != 1 ||
			!strings.Contains(j.LastError, `unknown key id "k1"`) || !strings.HasPrefix(j.PayloadError, "undecryptable: ") {
			t.Errorf("job %d: reason %q class %v attempt %d error %q payload error %q", id, j.DeadReason, j.LastErrorClass, j.Attempt,
				j.LastError, j.PayloadError)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("the handler ran %d times, want once (the readable job)", calls.Load())
	}
}
