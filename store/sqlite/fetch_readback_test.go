package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestFetchReadsBackAfterContextEnds: a fetch whose context ends between
// the lease and the read of the leased jobs (a worker bounds its fetch by
// the lease, and a loaded machine's fetch outlasted a 1 s one) still
// returns the jobs it leased. It returned an error, and the jobs, leased
// to no handler, waited for their leases to expire and be rescued as
// failed attempts.
func TestFetchReadsBackAfterContextEnds(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "db"), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	var reqs []store.NewJob
	for i := range 3 {
		reqs = append(reqs, store.NewJob{Kind: "k", Queue: "q", RunAt: now, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	enq, err := st.Enqueue(context.Background(), reqs, now)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range enq {
		ids = append(ids, j.ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fetchLeasedHook = cancel // the fetch's context ends once the lease is committed
	defer func() { fetchLeasedHook = nil }()
	jobs, err := st.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil {
		t.Fatalf("fetch whose context ended after the lease: %v", err)
	}
	if len(jobs) != len(ids) {
		t.Fatalf("%d jobs fetched, want %d", len(jobs), len(ids))
	}
	for i, j := range jobs {
		if j.ID != ids[i] || j.State != store.Running || j.Worker != "w" || j.Attempt != 1 {
			t.Errorf("job %d: %+v", i, j)
		}
	}
}
