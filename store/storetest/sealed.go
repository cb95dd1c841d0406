package storetest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// SealedDB is what RunSealed needs of a store: Open opens the test's
// database (the same one at each call of a test, empty at the first)
// with a payload codec; Raw reads the payload column of every row of
// its jobs table as the database holds it, by job id; All returns every
// byte the database holds (its files, or every row of every table as
// text), after the store was closed.
type SealedDB struct {
	Open func(t *testing.T, c store.PayloadCodec) store.Store
	Raw  func(t *testing.T) map[int64][]byte
	All  func(t *testing.T) []byte
}

// sealedKeys returns a key list of the ids given, each key derived from
// its id and seed.
func sealedKeys(t *testing.T, seed byte, ids ...string) *seal.Keyring {
	var lines []string
	for i, id := range ids {
		lines = append(lines, id+":"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{seed + byte(i)}, seal.KeySize)))
	}
	k, err := seal.ParseKeys([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// RunSealed checks payload encryption at rest (Options.Payloads of the
// stores, store.PayloadCodec): every way a payload gets into the jobs
// table (Enqueue, with and without idempotency keys, AddDead, Redrive and
// a redrive operation with a new payload, a replay) leaves no plaintext
// byte sequence in the database, every read gives the plaintext back, a
// queue not chosen is kept as it is, and a store without the key reads
// the sealed payloads as undecryptable (PayloadError) without failing:
// Get, List and Fetch.
func RunSealed(t *testing.T, db SealedDB) {
	t.Helper()
	keys := sealedKeys(t, 1, "k1")
	policy := &seal.Policy{Keys: keys, Queues: map[string]bool{"sec": true, "sec2": true}}
	s := db.Open(t, policy)
	x := &h{t: t, s: s, ctx: t.Context()}
	secret := func(n int) []byte { return fmt.Appendf(nil, `{"token":"PLAINTEXT-%03d-MARK"}`, n) }
	marker := []byte("PLAINTEXT-")
	var resultOf int64    // the workflow job whose dependency recorded a sealed result
	var completedOf int64 // that dependency

	// Enqueue: plain, keyed twice (the second returns the holder), into
	// a queue not sealed.
	jobs := x.enqueue(at(0),
		store.NewJob{Queue: "sec", Kind: "k", Payload: secret(1)},
		store.NewJob{Queue: "sec", Kind: "k", Payload: secret(2), IdempotencyKey: "idem"},
		store.NewJob{Queue: "open", Kind: "k", Payload: raw(`{"open":true}`)})
	again := x.enqueue(at(0), store.NewJob{Queue: "sec", Kind: "k", Payload: secret(99), IdempotencyKey: "idem"})
	if !again[0].Existing || !jsonEqual(again[0].Payload, secret(2)) {
		t.Errorf("holder of the key: existing %v payload %s, want %s", again[0].Existing, again[0].Payload, secret(2))
	}
	for i, want := range [][]byte{secret(1), secret(2), raw(`{"open":true}`)} {
		if !jsonEqual(jobs[i].Payload, want) {
			t.Errorf("Enqueue returned payload %s, want %s", jobs[i].Payload, want)
		}
		if got := x.get(jobs[i].ID); !jsonEqual(got.Payload, want) || got.PayloadError != "" {
			t.Errorf("Get(%d) payload %s (%q), want %s", jobs[i].ID, got.Payload, got.PayloadError, want)
		}
	}
	// AddDead, then a dead job redriven with a new payload, alone and by
	// an operation, and a replay (a copy).
	// (The first keeps, in its history, the payload an edit replaced
	// before it was exported: an import brings it, in clear.)
	dead, err := s.AddDead(x.ctx, []store.DeadJob{{Queue: "sec", Kind: "k", Payload: secret(3), Attempt: 1, DeadAt: at(0), LastErrorClass: failure.Permanent, DeadReason: "x",
		History: []store.Event{{Kind: store.EventRedriven, At: at(0), PreviousPayload: string(secret(13))}}},
		{Queue: "sec2", Kind: "k", Payload: secret(4), Attempt: 1, DeadAt: at(0), LastErrorClass: failure.Permanent, DeadReason: "x"}}, at(0))
	if err != nil {
		t.Fatalf("AddDead: %v", err)
	}
	if !jsonEqual(dead[0].Payload, secret(3)) {
		t.Errorf("AddDead returned %s", dead[0].Payload)
	}
	x.redrive(store.RedriveParams{IDs: []int64{dead[0].ID}, Now: at(time.Second), Payload: secret(5)})
	if got := x.get(dead[0].ID); !jsonEqual(got.Payload, secret(5)) {
		t.Errorf("redriven with a payload: %s", got.Payload)
	}
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpRedrive, Params: store.OperationParams{Batch: 10,
		Filter: store.Filter{IDs: []int64{dead[1].ID}}, Payload: secret(6)}}, at(2*time.Second))
	x.claimOp(op.ID, "w", at(2*time.Second))
	x.runOp(x.getOp(op.ID), "w", 10, at(2*time.Second))
	if got := x.get(dead[1].ID); !jsonEqual(got.Payload, secret(6)) {
		t.Errorf("redriven by an operation: %s", got.Payload)
	}
	rop := x.createOp(store.NewOperation{ID: opID(2), Kind: store.OpReplay, Params: store.OperationParams{Batch: 10,
		Filter: store.Filter{IDs: []int64{jobs[0].ID}}}}, at(3*time.Second))
	x.claimOp(rop.ID, "w", at(3*time.Second))
	x.runOp(x.getOp(rop.ID), "w", 10, at(3*time.Second))
	copies := x.listAll(store.Filter{Queue: "sec"}, 100)
	replayed := 0
	for _, j := range copies {
		if j.ReplayOf != 0 {
			replayed++
			if !jsonEqual(j.Payload, secret(1)) {
				t.Errorf("replayed copy payload %s", j.Payload)
			}
		}
	}
	if replayed != 1 {
		t.Errorf("%d replayed copies, want 1", replayed)
	}
	// A workflow's jobs and callbacks, where the store has workflows.
	if ws, ok := s.(store.Workflows); ok {
		w, err := ws.EnqueueWorkflow(x.ctx, store.NewWorkflow{Name: "sealed", Jobs: []store.WorkflowNode{
			{Name: "a", Job: store.NewJob{Queue: "sec", Kind: "k", Payload: secret(8), MaxRetries: 1, RunAt: at(time.Hour)}},
			{Name: "b", Job: store.NewJob{Queue: "sec", Kind: "k", Payload: secret(9), MaxRetries: 1}, After: []string{"a"}}},
			OnSuccess: &store.NewJob{Queue: "sec", Kind: "k", Payload: secret(10), MaxRetries: 1}}, at(3*time.Second))
		if err != nil {
			t.Fatalf("EnqueueWorkflow: %v", err)
		}
		got, err := ws.GetWorkflow(x.ctx, w.ID)
		if err != nil {
			t.Fatalf("GetWorkflow: %v", err)
		}
		byName := map[string]int64{}
		for _, j := range got.Jobs {
			byName[j.Name] = j.JobID
			if full := x.get(j.JobID); !bytes.Contains(full.Payload, marker) {
				t.Errorf("workflow job %d reads %s, want its plaintext", j.JobID, full.Payload)
			}
		}
		// a completes with a result (SetResult): stored sealed, read
		// back opened by its dependent.
		for _, j := range x.fetch(store.FetchParams{Queue: "sec", Worker: "wres", Limit: 100, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour)}) {
			if j.ID != byName["a"] {
				continue
			}
			o := completeOf(j, at(time.Hour))
			o.Result = secret(11)
			x.finish(o)
		}
		deps, err := ws.DependencyResults(x.ctx, byName["b"])
		if err != nil || len(deps) != 1 || !jsonEqual(deps[0].Result, secret(11)) || deps[0].ResultError != "" {
			t.Errorf("DependencyResults of b: %+v, %v; want a's result in plaintext", deps, err)
		}
		if a := x.get(byName["a"]); !jsonEqual(a.Result, secret(11)) || a.ResultError != "" {
			t.Errorf("Get of a: result %s (%q), want its result in plaintext", a.Result, a.ResultError)
		}
		resultOf, completedOf = byName["b"], byName["a"]
	}
	// A payload longer than MaxPreviousPayload, replaced by an edited
	// redrive: the history keeps its envelope whole, and it opens.
	long := fmt.Appendf(nil, `{"token":"PLAINTEXT-LONG-MARK","pad":"%s"}`, strings.Repeat("p", 2*store.MaxPreviousPayload))
	longDead, err := s.AddDead(x.ctx, []store.DeadJob{{Queue: "sec", Kind: "k", Payload: long, Attempt: 1, DeadAt: at(0),
		LastErrorClass: failure.Permanent, DeadReason: "x"}}, at(0))
	if err != nil {
		t.Fatalf("AddDead: %v", err)
	}
	x.redrive(store.RedriveParams{IDs: []int64{longDead[0].ID}, Now: at(time.Second), Payload: secret(12)})
	previous := func(s store.Store, c store.PayloadCodec) []byte {
		t.Helper()
		j, err := s.Get(t.Context(), longDead[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range j.History {
			if ev.Kind == store.EventRedriven && ev.PreviousPayload != "" {
				p, err := c.Open("sec", []byte(ev.PreviousPayload))
				if err != nil {
					t.Errorf("the previous payload (%d characters) does not open: %v", len(ev.PreviousPayload), err)
				}
				return p
			}
		}
		t.Errorf("job %d: no redriven event with a previous payload: %+v", j.ID, j.History)
		return nil
	}
	if p := previous(s, policy); !jsonEqual(p, long) {
		t.Errorf("the previous payload opens to %.80s..., want the payload replaced whole", p)
	}
	// Fetch opens.
	got := x.fetch(store.FetchParams{Queue: "sec2", Worker: "w", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour)})
	if len(got) != 1 || !jsonEqual(got[0].Payload, secret(6)) {
		t.Errorf("Fetch: %v", got)
	}

	// The database holds no plaintext of a sealed queue's payload, and
	// the payload of the queue not sealed as it was.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	all := db.All(t)
	for _, m := range [][]byte{marker, []byte(hex.EncodeToString(marker))} {
		if i := bytes.Index(all, m); i >= 0 {
			t.Errorf("the database holds plaintext: %q", all[max(0, i-40):min(len(all), i+60)])
		}
	}
	if !bytes.Contains(all, []byte(`"open":true`)) && !bytes.Contains(all, []byte(hex.EncodeToString([]byte(`"open":true`)))) {
		t.Error("All does not see the payload of the queue not sealed")
	}
	rows := db.Raw(t)
	if len(rows) < 6 {
		t.Fatalf("%d rows", len(rows))
	}
	for id, p := range rows {
		if bytes.Contains(p, marker) {
			t.Errorf("job %d is stored in clear: %s", id, p)
		}
		if id == jobs[2].ID {
			if !jsonEqual(p, raw(`{"open":true}`)) {
				t.Errorf("the queue not sealed stores %s", p)
			}
		} else if kid, ok := seal.KeyID(p); !ok || kid != "k1" {
			t.Errorf("job %d stored %q, not sealed under k1", id, p)
		}
	}

	// Without the key, reads show the job as undecryptable and fail
	// nothing; a Fetch leases it with PayloadError set.
	for _, c := range []store.PayloadCodec{nil, &seal.Policy{Keys: sealedKeys(t, 7, "k2")}, &seal.Policy{Keys: sealedKeys(t, 9, "k1")}} {
		s2 := db.Open(t, c)
		y := &h{t: t, s: s2, ctx: t.Context()}
		j := y.get(jobs[0].ID)
		if j.PayloadError == "" || !strings.HasPrefix(j.PayloadError, store.ReasonUndecryptable+": ") || len(j.Payload) != 0 {
			t.Errorf("without the key: payload %s, error %q", j.Payload, j.PayloadError)
		}
		if strings.Contains(j.PayloadError, "PLAINTEXT") {
			t.Errorf("error shows plaintext: %q", j.PayloadError)
		}
		list := y.listAll(store.Filter{Queue: "sec"}, 100)
		for _, j := range list {
			if j.PayloadError == "" {
				t.Errorf("listed job %d without a payload error", j.ID)
			}
		}
		if got := y.get(jobs[2].ID); !jsonEqual(got.Payload, raw(`{"open":true}`)) {
			t.Errorf("plain job without key: %s", got.Payload)
		}
		if ws, ok := s2.(store.Workflows); ok && resultOf != 0 {
			deps, err := ws.DependencyResults(y.ctx, resultOf)
			if err != nil || len(deps) != 1 || deps[0].Result != nil || !strings.HasPrefix(deps[0].ResultError, store.ReasonUndecryptable+": ") {
				t.Errorf("DependencyResults without the key: %+v, %v; want the result undecryptable", deps, err)
			}
			a := y.get(completedOf)
			if a.Result != nil || !strings.HasPrefix(a.ResultError, store.ReasonUndecryptable+": ") || strings.Contains(a.ResultError, "PLAINTEXT") {
				t.Errorf("Get without the key: result %s (%q), want it undecryptable", a.Result, a.ResultError)
			}
		}
		f := y.fetch(store.FetchParams{Queue: "sec", Worker: "w2", Limit: 1, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour)})
		if len(f) == 1 && f[0].PayloadError == "" {
			t.Errorf("fetched job %d without a payload error", f[0].ID)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// Rotation: with k2 current and k1 kept, a rekey operation re-seals
	// every payload under k1 (whatever its queue or state), leaves the
	// plain ones, and counts what it did; every payload still reads.
	rotated := &seal.Policy{Keys: sealedKeys(t, 1, "k1"), Queues: map[string]bool{"sec": true}}
	k2k1, err := seal.NewKeyring("k2", map[string][]byte{"k1": bytes.Repeat([]byte{1}, seal.KeySize), "k2": bytes.Repeat([]byte{2}, seal.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	rotated.Keys = k2k1
	s3 := db.Open(t, rotated)
	z := &h{t: t, s: s3, ctx: t.Context()}
	// A job enqueued now is sealed under k2 already.
	fresh := z.enqueue(at(4*time.Second), store.NewJob{Queue: "sec", Kind: "k", Payload: secret(7)})
	if _, err := s3.CreateOperation(z.ctx, store.NewOperation{ID: opID(3), Kind: store.OpRekey, Params: store.OperationParams{Batch: 3,
		Filter: store.Filter{Queue: "sec"}}}, at(5*time.Second)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a rekey with a filter: %v, want ErrInvalid", err)
	}
	kop := z.createOp(store.NewOperation{ID: opID(4), Kind: store.OpRekey, Params: store.OperationParams{Batch: 3}}, at(5*time.Second))
	z.claimOp(kop.ID, "w", at(5*time.Second))
	done := z.runOp(z.getOp(kop.ID), "w", 3, at(5*time.Second))
	sealedBefore := len(rows) - 1 // all but the open queue's
	if done.Progress.Rekeyed != int64(sealedBefore) || done.Progress.Failed != 0 || done.Progress.Processed != done.Progress.Rekeyed+done.Progress.Skipped {
		t.Errorf("rekey progress %+v, want %d rekeyed", done.Progress, sealedBefore)
	}
	for id := range rows {
		j := z.get(id)
		if j.PayloadError != "" || len(j.Payload) == 0 {
			t.Errorf("job %d after the rekey: %q", id, j.PayloadError)
		}
	}
	if got := z.get(fresh[0].ID); !jsonEqual(got.Payload, secret(7)) {
		t.Errorf("fresh job: %s", got.Payload)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	s4 := db.Open(t, rotated)
	counts, err := s4.(store.PayloadKeyCounter).PayloadKeyCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if counts["k1"] != 0 || counts["k2"] != int64(sealedBefore+1) || counts[""] != 1 {
		t.Errorf("PayloadKeyCounts after the rekey: %v", counts)
	}
	if err := s4.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing is left under k1: with k2 alone, the sealed result and the
	// long previous payload open.
	sk2 := db.Open(t, &seal.Policy{Keys: sealedKeys(t, 2, "k2"), Queues: map[string]bool{"sec": true}})
	if p := previous(sk2, &seal.Policy{Keys: sealedKeys(t, 2, "k2")}); !jsonEqual(p, long) {
		t.Errorf("after the rekey, the previous payload opens to %.80s... with k2", p)
	}
	if ws, ok := sk2.(store.Workflows); ok && resultOf != 0 {
		deps, err := ws.DependencyResults(t.Context(), resultOf)
		if err != nil || len(deps) != 1 || !jsonEqual(deps[0].Result, secret(11)) {
			t.Errorf("after the rekey, DependencyResults with k2 alone: %+v, %v", deps, err)
		}
	}
	if err := sk2.Close(); err != nil {
		t.Fatal(err)
	}
	byKey := map[string]int{}
	for id, p := range db.Raw(t) {
		kid, _ := seal.KeyID(p)
		byKey[kid]++
		if bytes.Contains(p, marker) {
			t.Errorf("job %d in clear after the rekey", id)
		}
	}
	if byKey["k1"] != 0 || byKey["k2"] != sealedBefore+1 || byKey[""] != 1 {
		t.Errorf("payloads by key after the rekey: %v", byKey)
	}

	// Nothing else is left under k1: with k2 alone, the payload a
	// redrive replaced (the history's previous payload) is still sealed,
	// under k2, and the new payload a redrive operation keeps opens.
	k2only := &seal.Policy{Keys: sealedKeys(t, 2, "k2"), Queues: map[string]bool{"sec": true}}
	s5 := db.Open(t, k2only)
	v := &h{t: t, s: s5, ctx: t.Context()}
	prev := 0
	for _, ev := range v.get(dead[0].ID).History {
		if ev.PreviousPayload == "" {
			continue
		}
		prev++
		if kid, _ := seal.KeyID([]byte(ev.PreviousPayload)); kid != "k2" {
			t.Errorf("job %d: previous payload under %q after the rekey, want k2: %.60s", dead[0].ID, kid, ev.PreviousPayload)
		}
	}
	if prev != 2 {
		t.Errorf("job %d: %d previous payloads in its history, want 2 (the imported one and the redrive's)", dead[0].ID, prev)
	}
	if o := v.getOp(op.ID); !jsonEqual(o.Params.Payload, secret(6)) {
		t.Errorf("operation %s: payload %.60s after the rekey, want it open under k2", op.ID, o.Params.Payload)
	}
	if err := s5.Close(); err != nil {
		t.Fatal(err)
	}
}
