package main

import (
	"strings"
	"testing"
)

// TestPurgeAllWithFilters: `dlq purge --all` takes the filters `dlq
// redrive --all` takes, and purges only the dead jobs they match,
// directly and through a server.
func TestPurgeAllWithFilters(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			mustCLI(t, "--db", db, "enqueue", "email", "--queue", "default")
			mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail")
			bury(t, db, "default")
			bury(t, db, "mail")
			out, stderr, err := runCLI(t, append(target, "dlq", "purge", "--all", "--queue", "default", "--since", "1h", "--yes")...)
			if err != nil || out != "purged 1 dead job(s)\n" {
				t.Fatalf("purge --all --queue default --since 1h: %v, %q %q", err, out, stderr)
			}
			out = mustCLI(t, "--db", db, "dlq", "ls")
			if !strings.Contains(out, "mail") {
				t.Errorf("the dead job of mail was purged too:\n%s", out)
			}
		})
	}
}

// TestPurgeByID: `dlq purge ID...` deletes the dead jobs named (it was
// cobra's `unknown command "11"`), directly and through a server; an id
// that is not a dead job is left alone and named in the error; ids do not
// mix with filters or --all.
func TestPurgeByID(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			cli := func(args ...string) (string, string, error) {
				return runCLI(t, append(append([]string{}, target...), args...)...)
			}
			for range 3 {
				mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail")
			}
			bury(t, db, "mail")                                            // jobs 1 to 3
			mustCLI(t, "--db", db, "enqueue", "email", "--queue", "alive") // job 4, pending
			out, stderr, err := cli("dlq", "purge", "1", "3")
			if err != nil || out != "purged 2 dead job(s)\n" {
				t.Fatalf("dlq purge 1 3: %v, %q %q", err, out, stderr)
			}
			out, _, err = cli("dlq", "purge", "2", "4", "99")
			if err == nil || out != "purged 1 dead job(s)\n" ||
				!strings.Contains(err.Error(), "job 4 is not dead") || !strings.Contains(err.Error(), "job 99 not found") {
				t.Fatalf("dlq purge 2 4 99: %v, %q", err, out)
			}
			if _, _, err := cli("jobs", "show", "4"); err != nil {
				t.Errorf("the pending job 4 is gone: %v", err)
			}
			if out := mustCLI(t, "--db", db, "--json", "dlq", "ls"); strings.Contains(out, `"id"`) {
				t.Errorf("dead jobs left:\n%s", out)
			}
			for _, args := range [][]string{
				{"dlq", "purge", "1", "--all"},
				{"dlq", "purge", "1", "--queue", "mail"},
				{"dlq", "purge", "x"},
				{"dlq", "purge", "0"},
			} {
				if _, _, err := cli(args...); err == nil {
					t.Errorf("%q succeeded", args)
				}
			}
		})
	}
}
