package dbtemplate

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type closer func() error

func (c closer) Close() error { return c() }

// TestCopy: the template is built once, and each copy holds its bytes.
func TestCopy(t *testing.T) {
	builds := 0
	tmpl := New(func(path string) (io.Closer, error) {
		builds++
		return closer(func() error { return os.WriteFile(path, []byte("migrated"), 0o600) }), nil
	})
	for i := range 3 {
		p := tmpl.Copy(t, filepath.Join(t.TempDir(), "redrive.db"))
		if b, err := os.ReadFile(p); err != nil || string(b) != "migrated" {
			t.Fatalf("copy %d: %q, %v", i, b, err)
		}
	}
	if builds != 1 {
		t.Errorf("built %d times, want once", builds)
	}
}

// TestBuildRefusesALeftoverLog: a write-ahead log left after the close
// would hold part of the database the copy lacks.
func TestBuildRefusesALeftoverLog(t *testing.T) {
	tmpl := New(func(path string) (io.Closer, error) {
		return closer(func() error {
			if err := os.WriteFile(path, []byte("db"), 0o600); err != nil {
				return err
			}
			return os.WriteFile(path+"-wal", []byte("frames"), 0o600)
		}), nil
	})
	if _, err := tmpl.build(); err == nil || !strings.Contains(err.Error(), "-wal still holds 6 bytes") {
		t.Errorf("build with a leftover log: %v", err)
	}
}
