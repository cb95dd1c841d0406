package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runCLI runs the command line args and returns its standard output,
// standard error and error.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
