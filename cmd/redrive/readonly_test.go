package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadOnlyCommands: the commands that only read work directly on a
// SQLite database nothing can write to (its file and folder made
// immutable with chattr +i, which root meets too), and leave nothing
// behind; a command that writes fails there with a clear error.
func TestReadOnlyCommands(t *testing.T) {
	clearConnEnv(t)
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("no chattr")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "redrive.db")
	seedWaiting(t, db, "mail", 2, false)
	for _, suffix := range []string{"-gate", "-turn", "-wal", "-shm"} {
		os.Remove(db + suffix)
	}
	for _, p := range []string{db, dir} {
		if out, err := exec.Command("chattr", "+i", p).CombinedOutput(); err != nil {
			t.Skipf("chattr +i: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", p).Run() })
	}
	out := mustCLI(t, "--db", db, "jobs", "ls")
	wantIn(t, out, "mail")
	for _, args := range [][]string{
		{"jobs", "show", "1"}, {"dlq", "ls"}, {"dlq", "groups"}, {"dlq", "count"}, {"stats"}, {"queues", "ls"},
		{"limits", "ls"}, {"workers", "ls"}, {"breakers", "ls"}, {"periodic", "ls"}, {"operations", "ls"}, {"workflows", "ls"},
		{"--json", "jobs", "ls"},
	} {
		if _, stderr, err := runCLI(t, append([]string{"--db", db}, args...)...); err != nil {
			t.Errorf("redrive %s on a read-only database: %v\n%s", strings.Join(args, " "), err, stderr)
		}
	}
	if _, _, err := runCLI(t, "--db", db, "jobs", "cancel", "1"); err == nil {
		t.Error("a cancel on a read-only database succeeded")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the folder holds %v, want the database only", names)
	}
}
