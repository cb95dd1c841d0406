package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// RunSealedExport checks what a store gives a DLQ export and takes from
// an import when it seals payloads: the stores' reads (Get, List, an
// operation's OperationJobs) mark a payload stored sealed with its key
// (Job.PayloadKey) and keep an envelope they cannot open
// (Job.SealedPayload); ExportPayload with the store's codec
// (PayloadCodecStore) seals a payload of a sealed queue, or stored
// sealed, under the current key, bound to its queue, and writes one it
// cannot open as stored; AddDead keeps a DeadJob with Sealed as given
// (read back as plaintext with its key, as undecryptable without it,
// never sealed twice) and refuses one that is not an envelope. It may
// run on the database RunSealed used (it touches only its own queues).
func RunSealedExport(t *testing.T, db SealedDB) {
	t.Helper()
	k1 := sealedKeys(t, 1, "k1")
	policy := &seal.Policy{Keys: k1, Queues: map[string]bool{"xs": true}}
	stranger := sealedKeys(t, 40, "kz")
	marker := []byte("EXPORT-PLAINTEXT")
	secret := func(n int) []byte { return fmt.Appendf(nil, `{"token":"EXPORT-PLAINTEXT-%d"}`, n) }
	s := db.Open(t, policy)
	x := &h{t: t, s: s, ctx: t.Context()}
	if pc, ok := s.(store.PayloadCodecStore); !ok || pc.Payloads() != store.PayloadCodec(policy) {
		t.Fatalf("the store does not give its codec (PayloadCodecStore): %T", s)
	}
	sealedFor := func(k *seal.Keyring, queue string, p []byte) []byte {
		b, err := k.Seal(queue, p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dead := func(queue string, p []byte, sealed bool) store.DeadJob {
		return store.DeadJob{Queue: queue, Kind: "k", Payload: p, Sealed: sealed, Attempt: 1, DeadAt: at(0),
			LastErrorClass: failure.Permanent, DeadReason: "x"}
	}

	// A job marked sealed whose payload is not an envelope is refused,
	// and nothing of its batch is added.
	before := len(x.listAll(store.Filter{Queue: "xo"}, 100))
	if _, err := s.AddDead(x.ctx, []store.DeadJob{dead("xo", raw(`{"a":1}`), false), dead("xo", secret(0), true)}, at(0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AddDead of a sealed job holding plaintext: %v, want ErrInvalid", err)
	}
	if after := len(x.listAll(store.Filter{Queue: "xo"}, 100)); after != before {
		t.Errorf("a refused AddDead added %d jobs", after-before)
	}

	// a: a sealed queue's; b: a queue in clear; c: stored sealed in the
	// queue in clear (an import of a sealed export); d: sealed under a
	// key the store lacks.
	undecryptable := sealedFor(stranger, "xs", secret(4))
	added, err := s.AddDead(x.ctx, []store.DeadJob{dead("xs", secret(1), false), dead("xo", raw(`{"open":1}`), false),
		dead("xo", sealedFor(k1, "xo", secret(3)), true), dead("xs", undecryptable, true)}, at(0))
	if err != nil {
		t.Fatalf("AddDead: %v", err)
	}
	a, b, c, d := added[0].ID, added[1].ID, added[2].ID, added[3].ID
	rows := db.Raw(t)
	if !bytes.Equal(rows[d], undecryptable) {
		t.Errorf("a sealed job's payload is stored as %q, want the envelope as given", rows[d])
	}
	if kid, _ := seal.KeyID(rows[c]); kid != "k1" || bytes.Contains(rows[c], marker) {
		t.Errorf("an imported sealed payload is stored as %q", rows[c])
	}
	if got := x.get(c); !jsonEqual(got.Payload, secret(3)) || got.PayloadKey != "k1" {
		t.Errorf("an imported sealed payload reads %s (key %q), want its plaintext, sealed once", got.Payload, got.PayloadKey)
	}

	// What each read gives an export.
	check := func(what string, c store.PayloadCodec, j *store.Job, decrypt bool, wantKey string, want []byte) {
		t.Helper()
		p, key, err := store.ExportPayload(c, j, decrypt)
		if err != nil {
			t.Fatalf("%s: ExportPayload(job %d): %v", what, j.ID, err)
		}
		if key != wantKey {
			t.Errorf("%s: job %d exported under key %q, want %q", what, j.ID, key, wantKey)
		}
		switch {
		case wantKey == "":
			if !jsonEqual(p, want) {
				t.Errorf("%s: job %d exported %s, want %s", what, j.ID, p, want)
			}
		case j.PayloadError != "":
			if !bytes.Equal(p, want) {
				t.Errorf("%s: job %d exported %s, want the stored envelope %s", what, j.ID, p, want)
			}
		default:
			if bytes.Contains(p, marker) {
				t.Errorf("%s: job %d exported in clear: %s", what, j.ID, p)
			}
			ring := k1
			if wantKey == "k2" {
				ring = rotated(t)
			}
			plain, err := ring.Open(j.Queue, p)
			if err != nil || !jsonEqual(plain, want) {
				t.Errorf("%s: job %d exported %s, which opens (for its queue %s) to %s, %v; want %s", what, j.ID, p, j.Queue, plain, err, want)
			}
		}
	}
	reads := func(s store.Store, id int64) map[string]*store.Job {
		y := &h{t: t, s: s, ctx: t.Context()}
		out := map[string]*store.Job{"Get": y.get(id)}
		for _, j := range y.listAll(store.Filter{IDs: []int64{id}}, 10) {
			out["List"] = j
		}
		return out
	}
	for what, j := range reads(s, a) {
		check(what, policy, j, false, "k1", secret(1))
		check(what+" decrypted", policy, j, true, "", secret(1))
	}
	for what, j := range reads(s, b) {
		check(what, policy, j, false, "", raw(`{"open":1}`))
	}
	for what, j := range reads(s, c) {
		check(what, policy, j, false, "k1", secret(3))
		check(what+" decrypted", policy, j, true, "", secret(3))
	}
	for what, j := range reads(s, d) {
		if j.PayloadKey != "kz" || !bytes.Equal(j.SealedPayload, undecryptable) {
			t.Errorf("%s: undecryptable job: key %q, sealed payload %q", what, j.PayloadKey, j.SealedPayload)
		}
		check(what, policy, j, false, "kz", undecryptable)
		check(what+" decrypted", policy, j, true, "kz", undecryptable)
	}
	// An export operation's read.
	op := x.createOp(store.NewOperation{ID: opID(90), Kind: store.OpExport, Params: store.OperationParams{Batch: 10, Dir: "x",
		Filter: store.Filter{IDs: []int64{a, c, d}}}}, at(0))
	x.claimOp(op.ID, "w", at(0))
	jobs, err := s.OperationJobs(x.ctx, op.ID, 0, 10)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("OperationJobs: %d jobs, %v", len(jobs), err)
	}
	check("OperationJobs", policy, jobs[0], false, "k1", secret(1))
	check("OperationJobs", policy, jobs[1], false, "k1", secret(3))
	check("OperationJobs", policy, jobs[2], false, "kz", undecryptable)

	// An export of a's payload imported again (as an import does: the
	// envelope kept) reads its plaintext, in its queue only.
	exp, _, err := store.ExportPayload(policy, x.get(a), false)
	if err != nil {
		t.Fatal(err)
	}
	back, err := s.AddDead(x.ctx, []store.DeadJob{dead("xs", exp, true), dead("xo", exp, true)}, at(0))
	if err != nil {
		t.Fatalf("AddDead of an exported payload: %v", err)
	}
	if got := x.get(back[0].ID); !jsonEqual(got.Payload, secret(1)) {
		t.Errorf("an exported payload imported into its queue reads %s (%q)", got.Payload, got.PayloadError)
	}
	if got := x.get(back[1].ID); got.PayloadError == "" || len(got.Payload) != 0 {
		t.Errorf("an exported payload imported into another queue reads %s, want undecryptable", got.Payload)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// After a rotation, exports seal under the new current key.
	r := &seal.Policy{Keys: rotated(t), Queues: map[string]bool{"xs": true}}
	s2 := db.Open(t, r)
	for what, j := range reads(s2, a) {
		check(what+" rotated", r, j, false, "k2", secret(1))
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// A store without keys exports what it cannot open as stored, and
	// what is in clear as it is.
	s3 := db.Open(t, nil)
	for what, j := range reads(s3, a) {
		if j.PayloadError == "" {
			t.Fatalf("%s without keys: job %d reads %s", what, a, j.Payload)
		}
		check(what+" without keys", nil, j, false, "k1", rows[a])
	}
	for what, j := range reads(s3, b) {
		check(what+" without keys", nil, j, false, "", raw(`{"open":1}`))
	}
	// Without keys, a sealed job is still kept as given.
	kept, err := s3.AddDead(t.Context(), []store.DeadJob{dead("xs", exp, true)}, at(0))
	if err != nil {
		t.Fatalf("AddDead of a sealed job without keys: %v", err)
	}
	if got := db.Raw(t)[kept[0].ID]; !bytes.Equal(got, exp) {
		t.Errorf("without keys, a sealed job is stored as %q, want %q", got, exp)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	s4 := db.Open(t, policy)
	if got := (&h{t: t, s: s4, ctx: t.Context()}).get(kept[0].ID); !jsonEqual(got.Payload, secret(1)) {
		t.Errorf("a sealed job added without keys reads %s (%q) once the key is configured", got.Payload, got.PayloadError)
	}
	if err := s4.Close(); err != nil {
		t.Fatal(err)
	}
}

// rotated is the key list of RunSealedExport after a rotation: k2
// current, k1 kept.
func rotated(t *testing.T) *seal.Keyring {
	k, err := seal.NewKeyring("k2", map[string][]byte{"k1": bytes.Repeat([]byte{1}, seal.KeySize), "k2": bytes.Repeat([]byte{2}, seal.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
