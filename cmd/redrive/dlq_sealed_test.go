package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// cliMark is in the payloads of the encrypted queue of
// TestCLIExportSealed, and nowhere else.
const cliMark = "CLI-CLEARTEXT-91c2"

// filesHolding returns the files under dir that hold s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestCLIExportSealed: `dlq export` on a store with payload keys writes
// the encrypted queue's payloads sealed (no plaintext in the folder),
// --decrypt writes them in plaintext and is recorded in the audit log as
// local; `dlq import` of the sealed folder into another database with
// the keys gives the plaintext back, and without them keeps the jobs as
// undecryptable; over --server it is refused.
func TestCLIExportSealed(t *testing.T) {
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, seal.KeySize)))
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "sec")
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	codec, err := config.PayloadCodecFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "src.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler), Payloads: codec})
	if err != nil {
		t.Fatal(err)
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	var dead []store.DeadJob
	for range 3 {
		dead = append(dead, store.DeadJob{Queue: "sec", Kind: "k", Payload: json.RawMessage(`{"token":"` + cliMark + `"}`), Attempt: 1,
			DeadAt: time.Now(), LastErrorClass: failure.Permanent, DeadReason: "bad"})
	}
	if _, err := c.AddDead(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	sealed := filepath.Join(t.TempDir(), "sealed")
	if out := mustCLI(t, "--db", db, "dlq", "export", sealed); !strings.Contains(out, "exported 3 dead job(s)") {
		t.Errorf("export: %q", out)
	}
	if found := filesHolding(t, sealed, cliMark); len(found) != 0 {
		t.Errorf("the sealed export holds the plaintext in %v", found)
	}
	if found := filesHolding(t, sealed, `"payload_sealed": "k1"`); len(found) != 3 {
		t.Errorf("metadata.json says sealed in %d files, want 3", len(found))
	}
	clear := filepath.Join(t.TempDir(), "clear")
	mustCLI(t, "--db", db, "dlq", "export", clear, "--decrypt")
	if found := filesHolding(t, clear, cliMark); len(found) != 3 {
		t.Errorf("the decrypted export holds the plaintext in %d files, want 3", len(found))
	}
	audit := mustCLI(t, "--db", db, "--json", "audit", "ls")
	if !strings.Contains(audit, `\"decrypt\":true`) || !strings.Contains(audit, `"actor": "local"`) && !strings.Contains(audit, `"actor":"local"`) {
		t.Errorf("the audit log does not record the decrypted export as local: %s", audit)
	}

	// Import with the keys: the plaintext is back.
	dst := filepath.Join(t.TempDir(), "dst.db")
	if out := mustCLI(t, "--db", dst, "dlq", "import", sealed); !strings.Contains(out, "imported 3 dead job(s)") || !strings.Contains(out, "3 sealed, 0 undecryptable") {
		t.Errorf("import: %q", out)
	}
	if out := mustCLI(t, "--db", dst, "--json", "dlq", "ls"); strings.Count(out, cliMark) != 3 {
		t.Errorf("imported jobs read %s, want their plaintext", out)
	}
	// Without the keys: kept, undecryptable.
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "")
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "")
	lost := filepath.Join(t.TempDir(), "lost.db")
	if out := mustCLI(t, "--db", lost, "dlq", "import", sealed); !strings.Contains(out, "3 undecryptable") {
		t.Errorf("import without the keys: %q", out)
	}
	if out := mustCLI(t, "--db", lost, "--json", "dlq", "ls"); strings.Count(out, "undecryptable: ") != 3 || strings.Contains(out, cliMark) {
		t.Errorf("imported jobs without the keys read %s", out)
	}
	if _, _, err := runCLI(t, "--server", "http://127.0.0.1:1", "dlq", "import", sealed); err == nil || !strings.Contains(err.Error(), "works on the store") {
		t.Errorf("import over --server: %v", err)
	}
}
