package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCLINameRule: the CLI holds the names it is given to the name rule
// before touching the store: nothing invisible, nothing path-like.
func TestCLINameRule(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "redrive.db")
	mustCLI(t, "--db", db, "enqueue", "email")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "pause", "..", "--create"}, "looks like a path"},
		{[]string{"queues", "pause", "q\u200d", "--create"}, "cannot be seen"},
		{[]string{"periodic", "pause", ".."}, "looks like a path"},
		{[]string{"periodic", "rm", "s\u200b"}, "cannot be seen"},
		{[]string{"enqueue", "k\u2060"}, "cannot be seen"},
		{[]string{"enqueue", "k", "--queue", "."}, "looks like a path"},
	} {
		_, _, err := runCLI(t, append([]string{"--db", db}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}
