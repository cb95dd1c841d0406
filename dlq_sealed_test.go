package redrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// sealedMarker is in the payload of every job of the sealed queue of
// the export tests, and nowhere else.
const sealedMarker = "PLAINTEXT-MARK-7f3a"

// grepDir returns the files under dir that hold s.
func grepDir(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// storeOpener opens the same database again with a payload codec.
type storeOpener func(t *testing.T, c store.PayloadCodec) store.Store

// sealedStores returns an opener of a new database per call, on each
// store: SQLite, and PostgreSQL (a new schema; required in CI).
func sealedStores(t *testing.T) map[string]func(t *testing.T) storeOpener {
	return map[string]func(t *testing.T) storeOpener{
		"sqlite": func(t *testing.T) storeOpener {
			path := filepath.Join(t.TempDir(), "redrive.db")
			return func(t *testing.T, c store.PayloadCodec) store.Store {
				st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: quietLogger(), Payloads: c})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
		},
		"postgres": func(t *testing.T) storeOpener {
			url := pgTestURL(t)
			schema := fmt.Sprintf("redrive_sealed_%d_%d", os.Getpid(), schemaSeq.Add(1))
			t.Cleanup(func() {
				st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quietLogger()})
				if err == nil {
					st.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
					st.Close()
				}
			})
			return func(t *testing.T, c store.PayloadCodec) store.Store {
				st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quietLogger(), Payloads: c})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
		},
	}
}

// TestExportSealedImport: on a store sealing the queue "sec", every
// export (Client.Export, an export operation) writes its payloads
// sealed under the current key, and says so in metadata.json, so that
// the export folder holds no plaintext; ExportDecrypted and an export
// operation with Decrypt write plaintext. The sealed export imported
// into another store with the key runs its jobs with their plaintext;
// into a store without the key, its jobs are kept and read as
// undecryptable, die as undecryptable when redriven, and run once the
// key is configured.
func TestExportSealedImport(t *testing.T) {
	for name, newDB := range sealedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			k1 := keyPolicy(t, "k1", 1)
			k1.All, k1.Queues = false, map[string]bool{"sec": true}
			src := redrive.NewClient(newDB(t)(t, k1), redrive.ClientOptions{Logger: quietLogger()})
			var dead []store.DeadJob
			for i := range 5 {
				dead = append(dead, store.DeadJob{Queue: "sec", Kind: "k", Payload: fmt.Appendf(nil, `{"n":%d,"token":"%s"}`, i, sealedMarker),
					Attempt: 1, DeadAt: time.Now(), LastErrorClass: failure.Permanent, DeadReason: "bad", LastError: "bad input"})
			}
			dead = append(dead, store.DeadJob{Queue: "open", Kind: "k", Payload: json.RawMessage(`{"open":true}`), Attempt: 1,
				DeadAt: time.Now(), LastErrorClass: failure.Permanent, DeadReason: "bad"}, store.DeadJob{Queue: "sec", Kind: "k", IdempotencyKey: "once",
				Payload: json.RawMessage(`"` + sealedMarker + `"`), Attempt: 1, DeadAt: time.Now(), LastErrorClass: failure.Permanent, DeadReason: "bad"})
			added, err := src.AddDead(ctx, dead)
			if err != nil {
				t.Fatal(err)
			}
			const sealedJobs = 6
			root := t.TempDir()
			dirs := map[string]string{}
			for _, kind := range []string{"export", "decrypted", "op", "op-decrypted"} {
				dir := filepath.Join(root, kind)
				dirs[kind] = dir
				var n int
				switch kind {
				case "export":
					n, err = src.Export(ctx, dir, redrive.Filter{}, nil)
				case "decrypted":
					n, err = src.ExportDecrypted(ctx, dir, redrive.Filter{}, nil)
				default:
					var op *redrive.Operation
					op, err = src.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationExport, Dir: dir, Batch: 2,
						Decrypt: kind == "op-decrypted"})
					if err == nil {
						op, err = src.RunOperation(ctx, op.ID, nil)
					}
					if err == nil {
						n = int(op.Progress.Exported)
					}
				}
				if err != nil || n != len(added) {
					t.Fatalf("%s: %d exported, %v", kind, n, err)
				}
				found := grepDir(t, dir, sealedMarker)
				decrypted := strings.HasSuffix(kind, "decrypted")
				if !decrypted && len(found) != 0 {
					t.Errorf("%s: the folder holds plaintext in %v", kind, found)
				}
				if decrypted && len(found) != sealedJobs {
					t.Errorf("%s: the plaintext is in %d files, want %d", kind, len(found), sealedJobs)
				}
				if got := grepDir(t, dir, `"open": true`); len(got) != 1 {
					t.Errorf("%s: the queue in clear is in %d files", kind, len(got))
				}
				for _, j := range added {
					b, err := os.ReadFile(filepath.Join(dir, strconv.FormatInt(j.ID, 10), "metadata.json"))
					if err != nil {
						t.Fatal(err)
					}
					var m redrive.ExportedMetadata
					if err := json.Unmarshal(b, &m); err != nil {
						t.Fatal(err)
					}
					want := "k1"
					if decrypted || j.Queue == "open" {
						want = ""
					}
					if m.PayloadSealed != want {
						t.Errorf("%s: job %d (%s): payload_sealed %q, want %q", kind, j.ID, j.Queue, m.PayloadSealed, want)
					}
				}
			}

			// Imported into a store with the key, the jobs run with their
			// plaintext; importing again adds nothing (an import is
			// idempotent, keyless jobs included).
			withKey := newDB(t)
			dst := redrive.NewClient(withKey(t, k1), redrive.ClientOptions{Logger: quietLogger()})
			res, err := dst.Import(ctx, dirs["export"], nil)
			if err != nil || res.Imported != len(added) || res.Sealed != sealedJobs || res.Undecryptable != 0 {
				t.Fatalf("import with the key: %+v, %v", res, err)
			}
			if res, err := dst.Import(ctx, dirs["export"], nil); err != nil || res.Existing != len(added) || res.Imported != 0 {
				t.Fatalf("import again: %+v, %v", res, err)
			}
			seen := runImported(t, dst, nil)
			if n := strings.Count(strings.Join(seen, "\n"), sealedMarker); n != sealedJobs {
				t.Errorf("the handlers saw the plaintext %d times, want %d: %q", n, sealedJobs, seen)
			}

			// Into a store without the key: kept, undecryptable, dead
			// again as undecryptable when redriven; with the key
			// configured, they run.
			noKey := newDB(t)
			other := keyPolicy(t, "k9", 9)
			lost := redrive.NewClient(noKey(t, other), redrive.ClientOptions{Logger: quietLogger()})
			res, err = lost.Import(ctx, dirs["export"], nil)
			if err != nil || res.Imported != len(added) || res.Undecryptable != sealedJobs {
				t.Fatalf("import without the key: %+v, %v", res, err)
			}
			list, err := lost.List(ctx, redrive.Filter{Queue: "sec", States: []redrive.State{redrive.Dead}}, redrive.Page{Limit: 100})
			if err != nil || len(list.Jobs) != sealedJobs {
				t.Fatalf("listed %d, %v", len(list.Jobs), err)
			}
			for _, j := range list.Jobs {
				if !strings.HasPrefix(j.PayloadError, "undecryptable: ") {
					t.Errorf("job %d without the key: payload %s, error %q", j.ID, j.Payload, j.PayloadError)
				}
			}
			if got := runImported(t, lost, func(j *redrive.Job) {
				if j.Queue == "sec" && j.DeadReason != redrive.ReasonUndecryptable {
					t.Errorf("job %d died %q, want undecryptable", j.ID, j.DeadReason)
				}
			}); strings.Contains(strings.Join(got, ""), sealedMarker) || len(got) != 1 {
				t.Errorf("without the key the handlers saw %q", got)
			}
			if err := lost.Store().Close(); err != nil {
				t.Fatal(err)
			}
			both, err := seal.NewKeyring("k9", map[string][]byte{"k9": bytes.Repeat([]byte{9}, seal.KeySize), "k1": bytes.Repeat([]byte{1}, seal.KeySize)})
			if err != nil {
				t.Fatal(err)
			}
			found := redrive.NewClient(noKey(t, &seal.Policy{Keys: both, All: true}), redrive.ClientOptions{Logger: quietLogger()})
			seen = runImported(t, found, nil)
			if n := strings.Count(strings.Join(seen, "\n"), sealedMarker); n != sealedJobs {
				t.Errorf("with the key configured the handlers saw the plaintext %d times, want %d: %q", n, sealedJobs, seen)
			}
		})
	}
}

// runImported redrives every dead job of c's store and runs them with a
// worker until none is pending: it returns the payloads the handler saw
// (the handler succeeds), and calls died, if set, on each job dead
// again.
func runImported(t *testing.T, c *redrive.Client, died func(j *redrive.Job)) []string {
	t.Helper()
	ctx := context.Background()
	list, err := c.List(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}}, redrive.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range list.Jobs {
		ids = append(ids, j.ID)
	}
	if _, err := c.Redrive(ctx, redrive.RedriveRequest{IDs: ids}); err != nil {
		t.Fatal(err)
	}
	p := fastPolicy(0)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger(), Policy: &p, PollInterval: 20 * time.Millisecond,
		Queues: map[string]int{"sec": 2, "open": 1}})
	e := &env{t: t, store: c.Store(), client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
	var (
		mu   sync.Mutex
		seen []string
	)
	w.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(j.Payload))
		return nil
	})
	e.start()
	for _, id := range ids {
		j := e.waitEnded(id)
		if j.State == redrive.Dead && died != nil {
			died(j)
		}
	}
	e.stop()
	mu.Lock()
	defer mu.Unlock()
	return seen
}

// waitEnded waits until the job is completed or dead.
func (e *env) waitEnded(id int64) *redrive.Job {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if j.State == redrive.Completed || j.State == redrive.Dead {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d stuck in %s, want completed or dead", id, j.State)
		}
		e.waitEngine()
	}
}
