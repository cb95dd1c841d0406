package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// keyLine is a key list line of id, its key 32 bytes of b.
func keyLine(id string, b byte) string {
	return id + ":" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, seal.KeySize))
}

// TestKeysRotateCLI: payloads sealed under k1, in every state a job can
// be in; `redrive keys count` counts them, and with k2 put first
// `redrive keys rotate --yes` re-seals them all under k2 in a durable
// operation of several batches. Then, with k1 removed from the list,
// every job reads its own plaintext and the jobs table holds nothing
// under k1.
func TestKeysRotateCLI(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "redrive.db")
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "*")
	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyLine("k1", 1))
	k1, err := seal.ParseKeys([]byte(keyLine("k1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler), Payloads: &seal.Policy{Keys: k1, All: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{}
	var jobs []store.NewJob
	for i := range 60 {
		nj := store.NewJob{Queue: fmt.Sprintf("q%d", i%3), Kind: "k", MaxRetries: 1, Payload: fmt.Appendf(nil, `{"n":%d,"token":"SECRET-%03d"}`, i, i)}
		if i%2 == 1 {
			nj.RunAt = now.Add(time.Hour) // scheduled
		}
		jobs = append(jobs, nj)
	}
	out, err := st.Enqueue(ctx, jobs, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range out {
		want[j.ID] = string(jobs[i].Payload)
	}
	var dead []store.DeadJob
	for i := range 20 {
		dead = append(dead, store.DeadJob{Queue: "q0", Kind: "k", Payload: fmt.Appendf(nil, `{"dead":%d}`, i), Attempt: 1, DeadAt: now,
			LastErrorClass: failure.Permanent, DeadReason: "x"})
	}
	dj, err := st.AddDead(ctx, dead, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range dj {
		want[j.ID] = string(dead[i].Payload)
	}
	// A running job and a completed one.
	got, err := st.Fetch(ctx, store.FetchParams{Queue: "q0", Worker: "w", Limit: 2, Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil || len(got) != 2 {
		t.Fatalf("Fetch: %v, %v", got, err)
	}
	if ok, err := st.Finish(ctx, []store.Outcome{{JobID: got[0].ID, Queue: "q0", Attempt: got[0].Attempt, Lease: got[0].Lease,
		Worker: "w", Kind: store.Complete, At: now}}); err != nil || !ok[0] {
		t.Fatalf("Finish: %v, %v", ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	total := int64(len(want))

	counts := decode[map[string]int64](t, mustCLI(t, "--db", db, "--json", "keys", "count"))
	if counts["k1"] != total || len(counts) != 1 {
		t.Fatalf("keys count before: %v, want k1: %d", counts, total)
	}

	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyLine("k2", 2)+","+keyLine("k1", 1))
	text := mustCLI(t, "--db", db, "keys", "rotate", "--yes", "--batch", "7")
	if !strings.Contains(text, fmt.Sprintf("done: %d/%d", total, total)) || strings.Contains(text, "failed") || strings.Contains(text, "skipped") {
		t.Errorf("keys rotate printed:\n%s", text)
	}
	// The report says what the rotation did, as the docs promise
	// (progress rekeyed, skipped, failed).
	if !strings.Contains(text, fmt.Sprintf("(rekeyed %d)", total)) {
		t.Errorf("keys rotate does not say how many payloads it re-sealed:\n%s", text)
	}
	if !strings.Contains(text, "k2") {
		t.Errorf("keys rotate does not print the counts after:\n%s", text)
	}
	counts = decode[map[string]int64](t, mustCLI(t, "--db", db, "--json", "keys", "count"))
	if counts["k2"] != total || len(counts) != 1 {
		t.Fatalf("keys count after: %v, want k2: %d", counts, total)
	}
	// A second rotation has nothing to do.
	text = mustCLI(t, "--db", db, "keys", "rotate", "--yes")
	if !strings.Contains(text, fmt.Sprintf("(skipped %d)", total)) {
		t.Errorf("a second rotation printed:\n%s", text)
	}

	// k1 removed: every payload reads.
	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyLine("k2", 2))
	k2, err := seal.ParseKeys([]byte(keyLine("k2", 2)))
	if err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler), Payloads: &seal.Policy{Keys: k2, All: true}})
	if err != nil {
		t.Fatal(err)
	}
	for id, p := range want {
		j, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.PayloadError != "" || !jsonSame(t, j.Payload, []byte(p)) {
			t.Errorf("job %d (%s) after the rotation: %s (%q), want %s", id, j.State, j.Payload, j.PayloadError, p)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	show := decode[map[string]any](t, mustCLI(t, "--db", db, "--json", "jobs", "show", fmt.Sprint(out[0].ID)))
	if p, _ := json.Marshal(show["payload"]); !jsonSame(t, p, jobs[0].Payload) {
		t.Errorf("jobs show after the rotation: payload %s", p)
	}
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM jobs WHERE CAST(payload AS TEXT) LIKE '%rdenc:k1:%' OR CAST(payload AS TEXT) LIKE '%SECRET-%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d payloads still under k1 or in clear", n)
	}
}

// TestKeysRefusesServer: `redrive keys count` and `rotate` need the
// store and the keys, not a server.
func TestKeysRefusesServer(t *testing.T) {
	clearConnEnv(t)
	for _, cmd := range [][]string{{"count"}, {"rotate", "--yes"}} {
		_, _, err := runCLI(t, append([]string{"--server", "http://127.0.0.1:1", "keys"}, cmd...)...)
		if err == nil || !strings.Contains(err.Error(), "not through --server") {
			t.Errorf("keys %s --server: %v", cmd, err)
		}
	}
}

// jsonSame reports whether a and b are the same JSON value.
func jsonSame(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestRotateSealsPlaintextOfEncryptedQueues: jobs enqueued before their
// queue was encrypted; once keys are configured and the queue is among
// those encrypted, a rotation seals their payloads too (counted as
// rekeyed), and leaves those of a queue not encrypted in clear. The
// sealed payload still reads back as it was.
func TestRotateSealsPlaintextOfEncryptedQueues(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "redrive.db")
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "")
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := st.Enqueue(context.Background(), []store.NewJob{
		{Queue: "pay", Kind: "k", Payload: []byte(`{"card":"4111-PLAIN"}`)},
		{Queue: "mail", Kind: "k", Payload: []byte(`{"to":"a@example.com"}`)},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyLine("k1", 1))
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "pay")
	mustCLI(t, "--db", db, "keys", "rotate", "--yes")
	counts := decode[map[string]int64](t, mustCLI(t, "--db", db, "--json", "keys", "count"))
	if counts[""] != 1 || counts["k1"] != 1 {
		t.Errorf("after a rotation: %v, want the encrypted queue's payload under k1 and the other queue's in clear", counts)
	}
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var stored string
	if err := raw.QueryRow(`SELECT payload FROM jobs WHERE id = ?`, jobs[0].ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "4111-PLAIN") {
		t.Errorf("the encrypted queue's payload is still in clear in the database: %s", stored)
	}
	out := mustCLI(t, "--db", db, "--json", "jobs", "show", fmt.Sprint(jobs[0].ID))
	if !strings.Contains(out, "4111-PLAIN") {
		t.Errorf("the sealed payload does not read back as it was: %s", out)
	}
}
