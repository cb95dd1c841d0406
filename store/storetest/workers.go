package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testIdempotencyKeyKeptRace: enqueues of keys race the retention that
// deletes the jobs holding them: every enqueue is answered by the first
// job (alive, or gone with its key kept), and no second job is created.
func testIdempotencyKeyKeptRace(x *h) {
	const keys = 40
	var jobs []store.NewJob
	for i := range keys {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: fmt.Sprint("race-", i)})
	}
	leased := x.leaseNew(at(0), "w", jobs...)
	var outs []store.Outcome
	first := map[string]int64{}
	for _, j := range leased {
		outs = append(outs, completeOf(j, at(time.Second)))
		first[j.IdempotencyKey] = j.ID
	}
	x.finish(outs...)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() {
		for left := keys; left > 0; {
			n, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 3)
			if err != nil {
				errs <- err
				return
			}
			left -= int(n)
		}
	})
	for g := range 4 {
		wg.Go(func() {
			for round := range 5 {
				for i := range keys {
					k := fmt.Sprint("race-", (i+g*7+round)%keys)
					got, err := x.s.Enqueue(x.ctx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: k}}, at(2*time.Second))
					if err != nil {
						errs <- err
						return
					}
					if j := got[0]; !j.Existing || j.ID != first[k] {
						errs <- fmt.Errorf("key %s: answered by job %d (Existing %v, Gone %v), want the first job %d", k, j.ID, j.Existing, j.Gone, first[k])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.t.Error(err)
	}
	if n, err := x.s.Count(x.ctx, store.Filter{}); err != nil || n != 0 {
		x.t.Errorf("%d jobs left after the retention deleted them all (%v): an enqueue created a second job", n, err)
	}
}

// testWorkers: the registry of worker processes.
func testWorkers(x *h) {
	w1 := store.WorkerInfo{ID: "w1", Host: "h1", PID: 11, Instance: "boot-a/ns-1", Version: "v1.2.3", Queues: map[string]int{"q": 4},
		StartedAt: at(0), HeartbeatAt: at(0)}
	w2 := store.WorkerInfo{ID: "w2", Host: "h2", PID: 22, Instance: "boot-b/ns-2", Version: "(devel)", Queues: map[string]int{"q": 1, "r": 2},
		StartedAt: at(time.Second), HeartbeatAt: at(time.Second)}
	for _, w := range []store.WorkerInfo{w1, w2} {
		if err := x.s.RegisterWorker(x.ctx, w); err != nil {
			x.t.Fatal(err)
		}
	}
	if err := x.s.RegisterWorker(x.ctx, store.WorkerInfo{}); !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("RegisterWorker without an id = %v, want ErrInvalid", err)
	}
	leased := x.leaseNew(at(2*time.Second), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	ws, err := x.s.Workers(x.ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID != "w2" || ws[1].ID != "w1" {
		x.t.Fatalf("Workers = %+v, want w2 then w1", ws)
	}
	g := ws[1]
	if g.Host != "h1" || g.PID != 11 || g.Instance != "boot-a/ns-1" || g.Version != "v1.2.3" || g.Queues["q"] != 4 ||
		!sameTime(g.StartedAt, at(0)) || g.StoppedAt != nil || g.Running != 2 || ws[0].Running != 0 || ws[0].Queues["r"] != 2 {
		x.t.Errorf("w1 = %+v", g)
	}
	got, err := x.s.Leased(x.ctx, "w1", 10)
	if err != nil || len(got) != 2 || sortedIDs(got)[0] != sortedIDs(leased)[0] {
		x.t.Errorf("Leased(w1) = %d jobs, %v", len(got), err)
	}
	if got, _ := x.s.Leased(x.ctx, "w2", 10); len(got) != 0 {
		x.t.Errorf("Leased(w2) = %d jobs, want 0", len(got))
	}
	if err := x.s.HeartbeatWorker(x.ctx, "w1", at(3*time.Second)); err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.HeartbeatWorker(x.ctx, "nobody", at(3*time.Second)); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("HeartbeatWorker(unknown) = %v, want ErrNotFound", err)
	}
	if err := x.s.StopWorker(x.ctx, "w2", at(4*time.Second), "stopped"); err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.StopWorker(x.ctx, "w2", at(5*time.Second), "gone"); err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.HeartbeatWorker(x.ctx, "w2", at(6*time.Second)); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("HeartbeatWorker(stopped) = %v, want ErrNotFound", err)
	}
	ws, _ = x.s.Workers(x.ctx)
	byID := map[string]store.WorkerInfo{}
	for _, w := range ws {
		byID[w.ID] = w
	}
	if w := byID["w1"]; !sameTime(w.HeartbeatAt, at(3*time.Second)) {
		x.t.Errorf("w1 heartbeat %s, want 3s", fmtTime(w.HeartbeatAt))
	}
	if w := byID["w2"]; w.StoppedAt == nil || !sameTime(*w.StoppedAt, at(4*time.Second)) || w.StopReason != "stopped" {
		x.t.Errorf("w2 after two stops: stopped %s reason %q; want the first stop", fmtTimePtr(w.StoppedAt), w.StopReason)
	}
	// Registering again starts afresh.
	w2.StartedAt, w2.HeartbeatAt = at(7*time.Second), at(7*time.Second)
	if err := x.s.RegisterWorker(x.ctx, w2); err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.HeartbeatWorker(x.ctx, "w2", at(8*time.Second)); err != nil {
		x.t.Errorf("HeartbeatWorker after registering again: %v", err)
	}
	// Retention: w1's heartbeat (3s) is older than the cutoff; w2 is live.
	if n, err := x.s.DeleteWorkers(x.ctx, at(5*time.Second)); err != nil || n != 1 {
		x.t.Errorf("DeleteWorkers(5s) = %d, %v; want 1", n, err)
	}
	if ws, _ := x.s.Workers(x.ctx); len(ws) != 1 || ws[0].ID != "w2" {
		x.t.Errorf("after DeleteWorkers: %+v", ws)
	}
}

// testWorkerKinds: a worker records the kinds it runs when it registers;
// registering again replaces them; a worker that records none (nil, a
// worker of an older version) reads back as unknown (nil), one without
// handlers as an empty list.
func testWorkerKinds(x *h) {
	reg := func(id string, kinds []string) {
		x.t.Helper()
		w := store.WorkerInfo{ID: id, Host: "h", PID: 1, Queues: map[string]int{"q": 1}, Kinds: kinds, StartedAt: at(0), HeartbeatAt: at(0)}
		if err := x.s.RegisterWorker(x.ctx, w); err != nil {
			x.t.Fatal(err)
		}
	}
	byID := func() map[string]store.WorkerInfo {
		x.t.Helper()
		ws, err := x.s.Workers(x.ctx)
		if err != nil {
			x.t.Fatal(err)
		}
		m := map[string]store.WorkerInfo{}
		for _, w := range ws {
			m[w.ID] = w
		}
		return m
	}
	reg("known", []string{"send.email", "http", "http", "ünïcode.kind"})
	reg("unknown", nil)
	reg("none", []string{})
	got := byID()
	if k := got["known"].Kinds; fmt.Sprint(k) != "[http send.email ünïcode.kind]" {
		x.t.Errorf("known.Kinds = %q, want sorted without duplicates [http send.email ünïcode.kind]", k)
	}
	if k := got["unknown"].Kinds; k != nil {
		x.t.Errorf("unknown.Kinds = %#v, want nil (not recorded)", k)
	}
	if k := got["none"].Kinds; k == nil || len(k) != 0 {
		x.t.Errorf("none.Kinds = %#v, want an empty list", k)
	}
	// Registering again replaces the kinds, and forgets them when the
	// new registration records none.
	reg("known", []string{"download"})
	reg("none", nil)
	got = byID()
	if k := got["known"].Kinds; fmt.Sprint(k) != "[download]" {
		x.t.Errorf("known.Kinds after registering again = %q, want [download]", k)
	}
	if k := got["none"].Kinds; k != nil {
		x.t.Errorf("none.Kinds after registering again without kinds = %#v, want nil", k)
	}
	// Heartbeats and stops keep them.
	if err := x.s.HeartbeatWorker(x.ctx, "known", at(time.Second)); err != nil {
		x.t.Fatal(err)
	}
	if err := x.s.StopWorker(x.ctx, "known", at(2*time.Second), "stopped"); err != nil {
		x.t.Fatal(err)
	}
	if k := byID()["known"].Kinds; fmt.Sprint(k) != "[download]" {
		x.t.Errorf("known.Kinds after a heartbeat and a stop = %q, want [download]", k)
	}
}
