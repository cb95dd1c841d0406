package download_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// TestHashOnlyWhenAsked: a job without sha256 records its size only (the
// file was not hashed); with Options.RecordSHA256, or a payload's sha256,
// the digest is recorded.
func TestHashOnlyWhenAsked(t *testing.T) {
	content := data(300_000, 31)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, content, `"h"`, new(atomic.Int64))
	}))
	defer srv.Close()
	sum := hexSum(content)
	for _, tc := range []struct {
		record  bool
		payload map[string]any
		note    string
	}{
		{false, map[string]any{"url": srv.URL + "/a.bin", "dest": "a.bin"}, "300000 bytes to a.bin"},
		{false, map[string]any{"url": srv.URL + "/a.bin", "dest": "a.bin", "sha256": sum}, "300000 bytes to a.bin, sha256 " + sum},
		{true, map[string]any{"url": srv.URL + "/a.bin", "dest": "a.bin"}, "300000 bytes to a.bin, sha256 " + sum},
	} {
		dir := t.TempDir()
		client, _ := startWorker(t, download.Options{Dir: dir, RecordSHA256: tc.record})
		j, err := client.Enqueue(context.Background(), download.Kind, tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		j = waitDone(t, client, j.ID)
		ev := j.History[len(j.History)-1]
		if j.State != redrive.Completed || ev.Kind != store.EventCompleted || ev.Note != tc.note {
			t.Fatalf("record %v, payload %v: %s, last event %+v, want note %q", tc.record, tc.payload, j.State, ev, tc.note)
		}
		wantFile(t, filepath.Join(dir, "a.bin"), content)
	}
}

// TestCheckpointBytes: with Options.CheckpointBytes, the sidecar of a
// running download says that many bytes at most are not yet fsynced.
func TestCheckpointBytes(t *testing.T) {
	content := data(2<<20, 32)
	const sent = 1<<20 + 5000
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"c"`)
		w.Header().Set("Content-Length", "2097152")
		w.Write(content[:sent])
		w.(http.Flusher).Flush()
		<-release
		w.Write(content[sent:])
	}))
	defer srv.Close()
	defer close(release)
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, CheckpointBytes: 64 << 10})
	done := make(chan error, 1)
	go func() { done <- attempt(h, 5, map[string]any{"url": srv.URL + "/c.bin", "dest": "c.bin"}) }()
	var synced int64
	testwait.Until(t, "the sidecar's checkpoint near the bytes sent", 30*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, ".c.bin.redrive-5.meta"))
		var m struct{ Synced int64 }
		if err != nil || json.Unmarshal(b, &m) != nil {
			return false
		}
		synced = m.Synced
		return synced > sent-64<<10
	})
	if synced > sent {
		t.Fatalf("synced %d, more than the %d bytes sent", synced, sent)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(dir, "c.bin"), content)
}
