package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestCLIExportDecryptAuditedOnce: `dlq export --decrypt` on the store
// is recorded in the audit log once (before it writes anything), and a
// sealed export once (after it), never twice.
func TestCLIExportDecryptAuditedOnce(t *testing.T) {
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.KeySize)))
	t.Setenv("REDRIVE_ENCRYPT_QUEUES", "sec")
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	codec, err := config.PayloadCodecFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "src.db")
	ctx := context.Background()
	open := func() *sqlite.Store {
		st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler), Payloads: codec})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	if _, err := st.AddDead(ctx, []store.DeadJob{{Queue: "sec", Kind: "k", Payload: json.RawMessage(`{"a":1}`), Attempt: 1,
		DeadAt: time.Now(), LastErrorClass: failure.Permanent}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "--db", db, "dlq", "export", filepath.Join(t.TempDir(), "clear"), "--decrypt")
	mustCLI(t, "--db", db, "dlq", "export", filepath.Join(t.TempDir(), "sealed"))
	st = open()
	defer st.Close()
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: "dlq export"}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	decrypted, sealed := 0, 0
	for _, e := range entries {
		var target map[string]any
		if err := json.Unmarshal([]byte(e.Target), &target); err != nil {
			t.Fatalf("entry %d: target %q: %v", e.ID, e.Target, err)
		}
		if target["decrypt"] == true {
			decrypted++
		} else {
			sealed++
		}
	}
	if decrypted != 1 || sealed != 1 {
		t.Errorf("audit entries of dlq export: %d with decrypt, %d without, want 1 and 1: %+v", decrypted, sealed, entries)
	}
}
