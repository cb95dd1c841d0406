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
