package redrive_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"default", "webhooks.v2", "e-mail_send", "ünïcödé queue", "a:b@c+d", "a..b", ".hidden", "api.example.com:443", "[::1]:8080", "emoji 🎉"} {
		if err := redrive.CheckName("queue", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", " lead", "trail ", "a/b", `a\b`, "tab\there", "nul\x00", "\xff\xfe", "rlo\u202eevil",
		"lri\u2066x", "\u200d", "zwsp\u200bx", "shy\u00adx", ".", "..", "bom\ufeff", "private\ue000", "ls\u2028x",
		strings.Repeat("x", redrive.MaxNameLength+1)} {
		if err := redrive.CheckName("queue", bad); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestCheckNameInvisible: names that display as nothing, or as another
// name, are refused: default-ignorable characters (the Hangul fillers,
// the combining grapheme joiner), a variation selector on a letter, and
// names with no visible character at all (only combining marks or the
// blank braille pattern). An emoji's presentation selector is kept.
func TestCheckNameInvisible(t *testing.T) {
	for _, ok := range []string{"❤️ queue", "café", "café"} {
		if err := redrive.CheckName("queue", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"ㅤ", "queueㅤ", "ᅟ", "ﾠ", "a͏b", "⠀", "́",
		"⃝", "default️", "default󠄀", "឴"} {
		if err := redrive.CheckName("queue", bad); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}
