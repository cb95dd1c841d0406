package redrive_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestExportFilesPrivate: an export's files hold payloads (in plaintext
// for a queue not encrypted, and with --decrypt), secrets included: they
// are readable by their owner only (0600, directories 0700), whatever
// the umask.
func TestExportFilesPrivate(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	deadOne(t, e.client)
	dir := filepath.Join(t.TempDir(), "export")
	if _, err := e.client.Export(context.Background(), dir, redrive.Filter{}, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n++
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: others can read it", path, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil || n != 5 {
		t.Fatalf("walked %d entries, %v; want the folder, a job's and its 3 files", n, err)
	}
}
