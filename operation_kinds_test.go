package redrive_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// buryKinds enqueues one job per kind in queue and makes them dead.
func buryKinds(t *testing.T, c *redrive.Client, st store.Store, queue string, kinds ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	for _, k := range kinds {
		if _, err := c.Enqueue(ctx, k, map[string]int{"n": 1}, redrive.InQueue(queue)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	got, err := st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: len(kinds), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != len(kinds) {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	var ids []int64
	outs := make([]store.Outcome, len(got))
	for i, j := range got {
		outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Bury, At: now,
			Class: failure.Transient, DeadReason: "retries_exhausted", Error: "boom",
			Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: "transient", Error: "boom"}}
		ids = append(ids, j.ID)
	}
	if _, err := st.Finish(ctx, outs); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestOperationCheckKinds: a redrive or a replay with CheckKinds (as the
// API and the CLI start them) is refused when some selected jobs are in a
// queue whose live workers run none of their kinds, as an enqueue of them
// is; accepted when their queue has no live worker (they wait), or one
// that did not record its kinds; and without CheckKinds (the library's
// default, as Enqueue) it is not checked.
func TestOperationCheckKinds(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	now := time.Now()
	mail := buryKinds(t, c, st, "mail", "send.email", "email")
	buryKinds(t, c, st, "idle", "whatever")
	reg := func(id string, queues map[string]int, kinds []string) {
		t.Helper()
		if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: id, Host: "h", Queues: queues, Kinds: kinds, StartedAt: now, HeartbeatAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	reg("w1", map[string]int{"mail": 1}, []string{"bounce", "send.email"})
	start := func(r redrive.OperationRequest) error {
		t.Helper()
		r.CheckKinds = true
		op, err := c.StartOperation(ctx, r)
		if err == nil {
			if _, err := c.CancelOperation(ctx, op.ID); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	// By ids: the email job is refused, naming its queue and what runs.
	err := start(redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: mail})
	var ke *redrive.OperationKindError
	if !errors.As(err, &ke) || !errors.Is(err, redrive.ErrInvalid) || ke.Queue != "mail" || ke.Jobs != 1 ||
		!strings.Contains(err.Error(), "bounce, send.email") {
		t.Fatalf("redrive of an email job in mail: %v, want an OperationKindError (1 job, workers run bounce, send.email)", err)
	}
	if err := start(redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: mail[:1]}); err != nil {
		t.Errorf("redrive of the send.email job: %v", err)
	}
	// By filter: the kind named.
	err = start(redrive.OperationRequest{Kind: redrive.OperationRedrive, Filter: redrive.Filter{Kind: "email"}})
	if !errors.As(err, &ke) || len(ke.Kinds) != 1 || ke.Kinds[0] != "email" || !strings.Contains(err.Error(), `kind "email"`) {
		t.Errorf("redrive of kind email: %v", err)
	}
	if err := start(redrive.OperationRequest{Kind: redrive.OperationRedrive, Filter: redrive.Filter{Kind: "send.email"}}); err != nil {
		t.Errorf("redrive of kind send.email: %v", err)
	}
	// A replay too (every state).
	if err := start(redrive.OperationRequest{Kind: redrive.OperationReplay, Filter: redrive.Filter{Queue: "mail"}}); !errors.As(err, &ke) {
		t.Errorf("replay of queue mail: %v, want an OperationKindError", err)
	}
	// A queue no live worker serves: not checked.
	if err := start(redrive.OperationRequest{Kind: redrive.OperationRedrive, Filter: redrive.Filter{Queue: "idle"}}); err != nil {
		t.Errorf("redrive of a queue without workers: %v", err)
	}
	// Without CheckKinds: not checked.
	op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: mail})
	if err != nil {
		t.Errorf("redrive without CheckKinds: %v", err)
	} else if _, err := c.CancelOperation(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	// A worker of mail that did not record its kinds may run any.
	reg("w0", map[string]int{"mail": 1}, nil)
	if err := start(redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: mail}); err != nil {
		t.Errorf("redrive with a worker of unknown kinds: %v", err)
	}
}

// purgeOnCount is a store whose Count of a whole queue's jobs (no kind
// named), once armed, is followed by a purge of the jobs of kind purge
// in that queue: a retention pass or another operator's purge that
// lands between the counts CheckOperationKinds makes.
type purgeOnCount struct {
	store.Store
	armed bool
	purge string
}

func (p *purgeOnCount) Count(ctx context.Context, f store.Filter) (int64, error) {
	n, err := p.Store.Count(ctx, f)
	if p.armed && err == nil && f.Kind == "" && f.Queue != "" {
		p.armed = false
		g := f
		g.Kind = p.purge
		if _, err := p.Store.Purge(ctx, g, 100); err != nil {
			return 0, err
		}
	}
	return n, err
}

// TestOperationCheckKindsRacingPurge: jobs of a kind the queue's workers
// run that leave the selection while CheckOperationKinds counts it (a
// purge, a retention pass, another redrive) do not make it refuse a
// redrive all of whose jobs are of kinds that run.
func TestOperationCheckKindsRacingPurge(t *testing.T) {
	base := openStore(t)
	st := &purgeOnCount{Store: base, purge: "a"}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	now := time.Now()
	buryKinds(t, c, base, "q", "a", "a", "b")
	if err := base.RegisterWorker(ctx, store.WorkerInfo{ID: "w", Host: "h", Queues: map[string]int{"q": 1}, Kinds: []string{"a", "b"},
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	st.armed = true
	op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive, Filter: redrive.Filter{Queue: "q"}, CheckKinds: true})
	if err != nil {
		t.Fatalf("redrive of queue q, whose jobs are all of kinds its worker runs, while some are purged: %v", err)
	}
	if _, err := c.CancelOperation(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
}
