package storetest

import (
	"errors"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowKeyChecked: a workflow's own idempotency key is checked
// as the API checks it, by every store alike, before anything is
// stored: at most 512 bytes of UTF-8 without control
// characters. Unchecked, the Go API handed PostgreSQL a NUL or invalid
// UTF-8 (an internal error rather than ErrInvalid) or a key past the
// index's row size, which SQLite took as it was.
func testWorkflowKeyChecked(x *h) {
	const q, maxWorkflowKey = "wf-key", 512 // the REST API's bound
	nw := func(key string) store.NewWorkflow {
		return store.NewWorkflow{IdempotencyKey: key, Jobs: []store.WorkflowNode{{Name: "a", Job: store.NewJob{Queue: q, Kind: "a"}}}}
	}
	long := strings.Repeat("0123456789abcdef", 200) // 3,200 bytes
	for name, key := range map[string]string{
		"NUL":               "order\x00-1",
		"invalid UTF-8":     "order-\xff",
		"control character": "order\n1",
		"one byte too long": strings.Repeat("k", maxWorkflowKey+1),
		"past an index row": long,
	} {
		if _, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(0)); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("key with %s: error %v; want ErrInvalid", name, err)
		}
	}
	if ws, _, err := x.s.ListWorkflows(x.ctx, 0, 10); err != nil || len(ws) != 0 {
		x.t.Fatalf("after the refused keys: %d workflows, %v; want none", len(ws), err)
	}
	// A key at the bound is taken, and answers the second enqueue.
	key := strings.Repeat("é", maxWorkflowKey/2)
	first, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(0))
	if err != nil {
		x.t.Fatalf("key of %d bytes: %v", len(key), err)
	}
	again, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(time.Second))
	if err != nil || !again.Existing || again.ID != first.ID || again.IdempotencyKey != key {
		x.t.Fatalf("second enqueue of the key: %+v, %v; want workflow %d, existing", again, err, first.ID)
	}
}
