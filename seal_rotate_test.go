package redrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestRotateUnderLoad: 100,000 jobs sealed under k1 (5,000 with -short);
// the store then runs with k2 current and k1 kept, while enqueuers add
// jobs and workers run them, a rekey operation re-seals everything. At
// its end no payload is under k1 (counted by key id in the database),
// no job is lost or dead, and every handler saw its own plaintext.
func TestRotateUnderLoad(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 5_000
	}
	path := filepath.Join(t.TempDir(), "redrive.db")
	ctx := context.Background()
	k1 := bytes.Repeat([]byte{1}, seal.KeySize)
	old, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Synchronous: "normal", Payloads: keyPolicy(t, "k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	const batch = 1000
	for i := 0; i < n; i += batch {
		jobs := make([]store.NewJob, batch)
		for k := range jobs {
			jobs[k] = store.NewJob{Queue: redrive.DefaultQueue, Kind: "k", MaxRetries: -1, Payload: fmt.Appendf(nil, `{"n":%d}`, i+k)}
		}
		if _, err := old.Enqueue(ctx, jobs, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	keys, err := seal.NewKeyring("k2", map[string][]byte{"k1": k1, "k2": bytes.Repeat([]byte{2}, seal.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Synchronous: "normal", Payloads: &seal.Policy{Keys: keys, All: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger(), Policy: &p, Queues: map[string]int{redrive.DefaultQueue: 8}})
	var ran, bad atomic.Int64
	w.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		var v struct{ N *int }
		if json.Unmarshal(j.Payload, &v) != nil || v.N == nil {
			bad.Add(1)
		}
		ran.Add(1)
		return nil
	})
	e := &env{t: t, store: st, client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
	e.start()

	// Enqueuers run until the rotation ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var added atomic.Int64
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Enqueue(ctx, "k", json.RawMessage(fmt.Sprintf(`{"n":%d}`, 1_000_000*(g+1)+i))); err != nil {
					t.Error(err)
					return
				}
				added.Add(1)
			}
		}()
	}
	op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRekey, Batch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	final, err := c.RunOperation(ctx, op.ID, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if final.State != redrive.OperationDone || final.Progress.Failed != 0 {
		t.Fatalf("rekey ended %s, progress %+v", final.State, final.Progress)
	}
	e.stop()
	counts, err := st.PayloadKeyCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(n) + added.Load()
	if counts["k1"] != 0 || counts["k2"] != total || counts[""] != 0 {
		t.Errorf("payloads by key after the rotation: %v, want all %d under k2", counts, total)
	}
	all, err := c.Count(ctx, redrive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := c.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}})
	if err != nil {
		t.Fatal(err)
	}
	if all != total || dead != 0 || bad.Load() != 0 {
		t.Errorf("jobs %d (want %d), dead %d, handlers with a wrong payload %d", all, total, dead, bad.Load())
	}
	t.Logf("%d jobs sealed under k1, %d added during the rotation, %d run meanwhile; rekey progress %+v", n, added.Load(), ran.Load(), final.Progress)
}
