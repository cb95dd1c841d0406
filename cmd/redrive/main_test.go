package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runCLI runs the command line args and returns its standard output,
// standard error and error. Its deadline is a liveness bound only: at a
// load average of 30, under -race, six burn-downs of `bench throughput
// --tracing` (each opening and migrating a fresh database) outlasted 30 s.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestUnknownCommand(t *testing.T) {
	_, stderr, err := runCLI(t, "frobnicate")
	if err == nil {
		t.Fatal("want an error for an unknown command")
	}
	if !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("stderr = %q, want it to name the unknown command", stderr)
	}
}

func TestGlobalFlags(t *testing.T) {
	stdout, _, err := runCLI(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--db string", `(default "redrive.db")`, "--json", "policy", "bench"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("redrive --help lacks %q:\n%s", want, stdout)
		}
	}
}
