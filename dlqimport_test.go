package redrive_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// exportedSample exports two dead jobs of e's store (one with history
// and an idempotency key) and returns the folder and their ids.
func exportedSample(t *testing.T, c *redrive.Client) (string, []int64) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	added, err := c.AddDead(ctx, []store.DeadJob{
		{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"a": [1, 2], "b": "x"}`), Attempt: 3, Redriven: 1, DeadAt: now,
			CreatedAt: now.Add(-time.Hour), LastErrorClass: failure.Transient, DeadReason: "retries_exhausted", LastError: "503",
			Fingerprint: "fp", IdempotencyKey: "key-1", Dependency: "api", MaxRetries: 2, NotReprocessable: true,
			History: []store.Event{{Kind: store.EventRetry, Attempt: 1, At: now.Add(-time.Minute), Error: "503"}}},
		{Queue: "q", Kind: "k", Payload: json.RawMessage(`null`), Attempt: 1, DeadAt: now, LastErrorClass: failure.Permanent, DeadReason: "bad"},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "export")
	if _, err := c.Export(ctx, dir, redrive.Filter{}, nil); err != nil {
		t.Fatal(err)
	}
	return dir, []int64{added[0].ID, added[1].ID}
}

// An import gives back the jobs as exported: every field an export
// writes, the payload compacted.
func TestImportKeepsFields(t *testing.T) {
	src := newEnv(t, redrive.WorkerOptions{})
	dir, ids := exportedSample(t, src.client)
	dst := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	res, err := dst.client.Import(ctx, dir, nil)
	if err != nil || res.Imported != 2 || res.Sealed != 0 {
		t.Fatalf("import: %+v, %v", res, err)
	}
	list, err := dst.client.List(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}}, redrive.Page{Limit: 10})
	if err != nil || len(list.Jobs) != 2 {
		t.Fatalf("list: %d, %v", len(list.Jobs), err)
	}
	slices.SortFunc(list.Jobs, func(a, b *redrive.Job) int { return cmp.Compare(a.ID, b.ID) })
	for i, id := range ids {
		want, err := src.client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.client.Get(ctx, list.Jobs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		we, wm := redrive.ExportedFiles(want)
		ge, gm := redrive.ExportedFiles(got)
		we.JobID, wm.JobID, ge.JobID, gm.JobID = 0, 0, 0, 0
		if wm.IdempotencyKey == "" {
			// A job without a key gets one, for a second import to
			// skip it (TestImportTwiceAddsOnce).
			if !strings.HasPrefix(gm.IdempotencyKey, redrive.ImportKeyPrefix) {
				t.Errorf("job %d imported with the key %q", id, gm.IdempotencyKey)
			}
			gm.IdempotencyKey = ""
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, want.Payload); err != nil {
			t.Fatal(err)
		}
		wj, _ := json.Marshal([]any{we, wm, compact.String()})
		gj, _ := json.Marshal([]any{ge, gm, string(got.Payload)})
		if string(wj) != string(gj) {
			t.Errorf("job %d imported as\n%s\nwant\n%s", id, gj, wj)
		}
	}
}

// TestImportTwiceAddsOnce: an import is idempotent. Run again, it adds
// nothing, jobs without an idempotency key included; into the store the
// export came from, it adds a copy of a keyless job once.
func TestImportTwiceAddsOnce(t *testing.T) {
	src := newEnv(t, redrive.WorkerOptions{})
	dir, _ := exportedSample(t, src.client)
	dst := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	dead := func(c *redrive.Client) int {
		t.Helper()
		list, err := c.List(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}}, redrive.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Jobs)
	}
	for i, want := range []redrive.ImportResult{{Imported: 2}, {Existing: 2}} {
		res, err := dst.client.Import(ctx, dir, nil)
		if err != nil || res != want {
			t.Fatalf("import %d: %+v, %v; want %+v", i+1, res, err, want)
		}
	}
	if n := dead(dst.client); n != 2 {
		t.Errorf("%d dead jobs after two imports, want 2", n)
	}
	// Into the store it came from: the keyed job is there already; the
	// keyless one is added once.
	for i, want := range []redrive.ImportResult{{Imported: 1, Existing: 1}, {Existing: 2}} {
		res, err := src.client.Import(ctx, dir, nil)
		if err != nil || res != want {
			t.Fatalf("import %d into the source: %+v, %v; want %+v", i+1, res, err, want)
		}
	}
	if n := dead(src.client); n != 3 {
		t.Errorf("%d dead jobs in the source after two imports, want 3", n)
	}
	// Another export of the same jobs (a later run) names the same
	// deaths: nothing is added either.
	again := filepath.Join(t.TempDir(), "again")
	if _, err := src.client.Export(ctx, again, redrive.Filter{}, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := dst.client.Import(ctx, again, nil); err != nil || res != (redrive.ImportResult{Existing: 3}) {
		// The copy the source holds now carries the key of the job it
		// copies: the same dead letter, not added again either.
		t.Errorf("import of a later export: %+v, %v", res, err)
	}
}

// A folder that is not what an export writes fails the import, naming
// it, and nothing is added, whichever job is bad.
func TestImportRefusesBadFolder(t *testing.T) {
	src := newEnv(t, redrive.WorkerOptions{})
	dst := newEnv(t, redrive.WorkerOptions{})
	ctx := context.Background()
	for name, tc := range map[string]struct {
		file, content, want string
	}{
		"missing":       {"error.json", "", "error.json is missing"},
		"not json":      {"metadata.json", "{", "metadata.json"},
		"unknown field": {"error.json", `{"job_id":%d,"dead_at":"2026-01-01T00:00:00Z","class":"permanent","extra":1}`, "extra"},
		"other job":     {"error.json", `{"job_id":999999,"dead_at":"2026-01-01T00:00:00Z","class":"permanent"}`, "error.json is of job 999999"},
		"no dead_at":    {"error.json", `{"job_id":%d,"class":"permanent"}`, "dead_at is missing"},
		"bad class":     {"error.json", `{"job_id":%d,"dead_at":"2026-01-01T00:00:00Z","class":"nope"}`, "class"},
		"payload":       {"payload.json", "{nope", "payload.json is not JSON"},
		"sealed plain":  {"metadata.json", `{"job_id":%d,"queue":"q","kind":"k","created_at":"2026-01-01T00:00:00Z","reprocessable":true,"redriven":0,"max_retries":-1,"payload_sealed":"k1"}`, `sealed under key "k1"`},
		"trailing data": {"metadata.json", `{"job_id":%d,"queue":"q","kind":"k","created_at":"2026-01-01T00:00:00Z"} {}`, "data after"},
	} {
		t.Run(name, func(t *testing.T) {
			dir, ids := exportedSample(t, src.client)
			bad := ids[1]
			path := filepath.Join(dir, strconv.FormatInt(bad, 10), tc.file)
			var err error
			if tc.content == "" {
				err = os.Remove(path)
			} else {
				content := tc.content
				if strings.Contains(content, "%d") {
					content = strings.ReplaceAll(content, "%d", strconv.FormatInt(bad, 10))
				}
				err = os.WriteFile(path, []byte(content), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := dst.client.Import(ctx, dir, nil)
			if err == nil || !strings.Contains(err.Error(), "job folder "+strconv.FormatInt(bad, 10)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("import: %+v, %v; want an error naming folder %d and %q", res, err, bad, tc.want)
			}
			if n, err := dst.client.Count(ctx, redrive.Filter{}); err != nil || n != 0 || res.Imported != 0 {
				t.Errorf("a refused import added %d jobs (%d), %v", n, res.Imported, err)
			}
		})
	}
}

// FuzzParseExported: any three files are parsed or refused, never a
// panic; what is parsed is a dead job a store can keep (CheckDead), and
// a payload kept sealed is an envelope.
func FuzzParseExported(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte(`{"job_id":1,"attempts":1,"retry_count":0,"last_error":"x","class":"permanent","reason":"bad","fingerprint":"","dead_at":"2026-01-01T00:00:00Z","history":[]}`),
		[]byte(`{"job_id":1,"queue":"q","kind":"k","created_at":"2026-01-01T00:00:00Z","reprocessable":true,"redriven":0,"max_retries":-1}`))
	f.Add([]byte(`"rdenc:k1:AQID"`), []byte(`{"job_id":2,"class":"none","dead_at":"2026-01-01T00:00:00Z"}`),
		[]byte(`{"job_id":2,"queue":"q","kind":"k","created_at":"2026-01-01T00:00:00Z","payload_sealed":"k1"}`))
	f.Add([]byte(`null`), []byte(`{"job_id":3,"class":"transient","dead_at":"2026-01-01T00:00:00Z","history":[{"kind":"failed","attempt":1,"at":"2026-01-01T00:00:00Z"}]}`),
		[]byte(`{"job_id":3,"queue":"q","kind":"k","created_at":"0001-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, payload, errorJSON, metadataJSON []byte) {
		d, m, err := redrive.ParseExported(payload, errorJSON, metadataJSON)
		if err != nil {
			return
		}
		if m.JobID <= 0 || d.Queue == "" || d.Kind == "" || !json.Valid(d.Payload) {
			t.Fatalf("parsed %+v from metadata %+v", d, m)
		}
		if err := store.CheckDead(&d); err != nil {
			t.Fatalf("CheckDead: %v", err)
		}
		if d.Sealed {
			if id, ok := seal.KeyID(d.Payload); !ok || id != m.PayloadSealed {
				t.Fatalf("sealed payload %q, key %q", d.Payload, m.PayloadSealed)
			}
		} else if seal.IsSealed(d.Payload) {
			t.Fatalf("an envelope taken for plaintext: %q", d.Payload)
		}
	})
}
