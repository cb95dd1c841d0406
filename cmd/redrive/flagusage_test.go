package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestServeHelpValueNames checks that `serve --help` shows each flag's
// value name as one word: pflag takes the first back-quoted text of a
// usage string as the value name, so a usage quoting a command line in
// back quotes once printed "--kafka-topics dlq redrive --kafka-topic" and
// widened the flag column of every flag.
func TestServeHelpValueNames(t *testing.T) {
	stdout, _, err := runCLI(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	// A flag line: the flag, an optional one-word value name, then two or
	// more spaces before the usage.
	line := regexp.MustCompile(`^\s+(-\w, )?--[\w-]+( [\w.]+)?\s{2,}\S`)
	seen := 0
	for _, l := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "-") || !strings.HasPrefix(l, " ") {
			continue
		}
		seen++
		if !line.MatchString(l) {
			t.Errorf("serve --help: flag line with a value name of more than one word:\n%s", l)
		}
	}
	if seen < 20 {
		t.Fatalf("serve --help: %d flag lines found, want many:\n%s", seen, stdout)
	}
}

// TestFlagUsagesUnquoted checks every flag of every command: a usage
// string holds no back quote, so that no text of it becomes the flag's
// value name in the help.
func TestFlagUsagesUnquoted(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: usage holds a back quote, so its value name is %q: %s", c.CommandPath(), f.Name, name, f.Usage)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
