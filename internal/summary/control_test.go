package summary

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

// TestOfPrintable: a summary holds no control or format character,
// which a terminal would obey (C1 controls such as U+009B, the CSI of
// escape sequences) or which would reorder what the operator reads
// (bidirectional overrides such as U+202E): jobs ls writes summaries to
// the operator's terminal, from payloads any API client writes. They are
// shown escaped, \u009b.
func TestOfPrintable(t *testing.T) {
	for _, c := range []struct{ kind, payload string }{
		{"x", `{"a":"\u009b2J\u001b[31m","b\u202e":"gpj.exe\u202egnp"}`},
		{"x", `"\u200b\u2066x\u2069\u0085"`},
		{"http", `{"url":"https://exa\u202emple.com/p\u009bq"}`},
		{"download", `{"url":"https://example.com/\u202egpj.exe"}`},
	} {
		got := Of(c.kind, json.RawMessage(c.payload))
		if i := strings.IndexFunc(got, func(r rune) bool { return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
			t.Errorf("Of(%s, %s) = %q: holds %U", c.kind, c.payload, got, []rune(got[i:])[0])
		}
	}
}
