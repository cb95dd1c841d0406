package redrive_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// deadOne adds one dead job to c's store and returns it.
func deadOne(t *testing.T, c *redrive.Client) *redrive.Job {
	t.Helper()
	added, err := c.AddDead(context.Background(), []store.DeadJob{{Queue: "q", Kind: "k",
		Payload: json.RawMessage(`{"headers":{"Authorization":"Bearer s3cr3t-token"}}`), Attempt: 1, DeadAt: time.Now(),
		LastErrorClass: failure.Permanent, DeadReason: "bad"}})
	if err != nil {
		t.Fatal(err)
	}
	return added[0]
}

// TestExportFollowsNoLinkOut: a symbolic link planted where an export
// writes a job's directory (an export folder others can write to, an
// export run again over an old one) is not written through: the export
// fails, naming the job, and nothing is written outside its folder.
// Client.Export, and WriteExported (the CLI over the API).
func TestExportFollowsNoLinkOut(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	j := deadOne(t, e.client)
	for _, how := range []string{"Export", "WriteExported"} {
		dir := filepath.Join(t.TempDir(), "export")
		outside := t.TempDir()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, strconv.FormatInt(j.ID, 10))); err != nil {
			t.Fatal(err)
		}
		var err error
		switch how {
		case "Export":
			_, err = e.client.Export(context.Background(), dir, redrive.Filter{}, nil)
		default:
			ee, m := redrive.ExportedFiles(j)
			err = redrive.WriteExported(dir, j.Payload, ee, m)
		}
		if err == nil {
			t.Errorf("%s through a link leading out of the folder: no error", how)
		}
		entries, _ := os.ReadDir(outside)
		for _, en := range entries {
			t.Errorf("%s wrote %s outside its folder", how, filepath.Join(outside, en.Name()))
		}
	}
}
