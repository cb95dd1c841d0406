package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// sealedMark is in the payload of every dead job of the sealed queue of
// TestExportSealed, and nowhere else.
const sealedMark = "CLEARTEXT-5b1e"

// TestExportSealed: on a server whose store seals the queue "sec", the
// NDJSON export and the folder export send those payloads sealed, their
// metadata naming the key, without the plaintext anywhere (not in a
// summary, nor in an error that echoes the secret); decrypt=true sends
// them in plaintext to an admin, recorded in the audit log with who
// asked, and is refused (403 naming the admin role) to the read and
// operate roles.
func TestExportSealed(t *testing.T) {
	keys, err := seal.ParseKeys([]byte("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, seal.KeySize))))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet,
		Payloads: &seal.Policy{Keys: keys, Queues: map[string]bool{"sec": true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	opts := roleOptions()
	root := t.TempDir()
	opts.ExportDir = root
	e := newEnvOn(t, st, opts)
	e.runWorker()
	ctx := context.Background()
	secret, err := json.Marshal(map[string]any{"method": "GET", "url": "https://example.com/" + sealedMark,
		"headers": map[string]string{"X-Note": sealedMark}})
	if err != nil {
		t.Fatal(err)
	}
	var dead []store.DeadJob
	for range 3 {
		dead = append(dead, store.DeadJob{Queue: "sec", Kind: "http", Payload: secret, Attempt: 1, DeadAt: time.Now(),
			LastErrorClass: failure.Permanent, DeadReason: "http_400", LastError: "400"})
	}
	dead = append(dead, store.DeadJob{Queue: "open", Kind: "k", Payload: json.RawMessage(`{"open":true}`), Attempt: 1, DeadAt: time.Now(),
		LastErrorClass: failure.Permanent, DeadReason: "bad"})
	if _, err := e.client.AddDead(ctx, dead); err != nil {
		t.Fatal(err)
	}

	// The NDJSON export, without and with decrypt.
	e.token = roleTokens[RoleAdmin]
	for _, q := range []string{"", "?reveal=true"} {
		r := e.do("GET", "/v1/dlq/export"+q, "")
		if r.status != 200 || bytes.Contains(r.body, []byte(sealedMark)) {
			t.Fatalf("GET /v1/dlq/export%s: %d, plaintext in %s", q, r.status, r.body)
		}
		lines := readExport(t, r.body)
		if len(lines) != 4 {
			t.Fatalf("%d lines", len(lines))
		}
		for _, l := range lines {
			want := "k1"
			if l.Metadata.Queue == "open" {
				want = ""
			}
			if l.Metadata.PayloadSealed != want || (want != "" && !seal.IsSealed(l.Job.Payload)) {
				t.Errorf("line of job %d (%s): payload_sealed %q, payload %s", l.Job.ID, l.Metadata.Queue, l.Metadata.PayloadSealed, l.Job.Payload)
			}
		}
	}
	r := e.do("GET", "/v1/dlq/export?decrypt=true", "")
	if r.status != 200 || bytes.Count(r.body, []byte(sealedMark)) < 3 || bytes.Contains(r.body, []byte(`"payload_sealed"`)) {
		t.Fatalf("GET /v1/dlq/export?decrypt=true: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/v1/dlq/export?decrypt=maybe", ""), 400, "invalid", "decrypt")

	// The folder export, without and with decrypt.
	var ob operationBody
	e.want(e.do("POST", "/v1/dlq/export?wait=true", `{"all":true,"dir":"sealed"}`), 200, &ob)
	if ob.Operation.Exported != 4 {
		t.Fatalf("export: %+v", ob.Operation)
	}
	if found := grepFolder(t, filepath.Join(root, "sealed"), sealedMark); len(found) != 0 {
		t.Errorf("the sealed export holds the plaintext in %v", found)
	}
	e.want(e.do("POST", "/v1/dlq/export?wait=true", `{"all":true,"dir":"clear","decrypt":true}`), 200, &ob)
	if found := grepFolder(t, filepath.Join(root, "clear"), sealedMark); len(found) != 3 {
		t.Errorf("the decrypted export holds the plaintext in %v, want 3 files", found)
	}

	// The read and operate roles are refused decrypt, naming the role.
	for _, role := range []Role{RoleRead, RoleOperate} {
		e.token = roleTokens[role]
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/dlq/export?decrypt=true", ""},
			{"POST", "/v1/dlq/export", `{"all":true,"dir":"x","decrypt":true}`},
		} {
			r := e.do(c.method, c.path, c.body)
			wantErr(t, r, 403, "forbidden", "")
			if !strings.Contains(string(r.body), "admin role") {
				t.Errorf("%s %s as %s: %s, want the admin role named", c.method, c.path, role, r.body)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "x")); !os.IsNotExist(err) {
		t.Errorf("a refused export wrote: %v", err)
	}

	// The audit log says who asked for plaintext.
	e.token = roleTokens[RoleAdmin]
	var audit struct {
		Entries []store.AuditEntry `json:"entries"`
	}
	e.want(e.do("GET", "/v1/audit", ""), 200, &audit)
	var stream, folder int
	for _, en := range audit.Entries {
		switch {
		case en.Action == "GET /v1/dlq/export" && strings.Contains(en.Target, "decrypt=true"):
			if en.Actor != "admin-user" || en.Role != "admin" {
				t.Errorf("decrypted stream recorded as %q (%s)", en.Actor, en.Role)
			}
			stream++
		case en.Action == "POST /v1/dlq/export" && strings.Contains(en.Target, `"decrypt":true`) && en.Status < 300:
			if en.Actor != "admin-user" {
				t.Errorf("decrypted folder export recorded as %q", en.Actor)
			}
			folder++
		}
	}
	if stream != 1 || folder != 1 {
		t.Errorf("audit: %d decrypted streams, %d decrypted folder exports; want 1 and 1: %+v", stream, folder, audit.Entries)
	}
}

// grepFolder returns the files under dir that hold s.
func grepFolder(t *testing.T, dir, s string) []string {
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
