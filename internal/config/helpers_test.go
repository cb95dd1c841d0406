package config

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

// serveFlags are the flags of `redrive serve`: every setting's and the
// global --db, as the command adds them.
func serveFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("db", "redrive.db", "SQLite database file")
	AddFlags(fs)
	return fs
}

// loadConfig parses args as `redrive serve`'s flags and loads the
// configuration with env as the environment.
func loadConfig(t *testing.T, env map[string]string, args ...string) (*Serve, error) {
	t.Helper()
	fs := serveFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return Load(fs, func(k string) string { return env[k] })
}

// writeFile writes content to the file name in a temporary folder and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
