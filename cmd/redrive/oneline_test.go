package main

import (
	"strings"
	"testing"
	"unicode"
)

// TestOneLinePrintable: what jobs ls and jobs show print of a job's error
// text (a remote server's answer) or summary carries no control or format
// character for the operator's terminal to obey (ESC [, its C1 form
// U+009B) or to reorder the line with (U+202E): they show escaped.
func TestOneLinePrintable(t *testing.T) {
	got := oneLine("500: \x1b]0;pwned\x07 \x1b[2J\u009b31m e\u202egnp", 80)
	if strings.ContainsFunc(got, func(r rune) bool { return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) }) {
		t.Errorf("oneLine = %q, holds a control or format character", got)
	}
	if want := `500: \u001b]0;pwned\u0007 \u001b[2J\u009b31m e\u202egnp`; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}
