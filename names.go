package redrive

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength bounds queue, kind and dependency names, in bytes.
const MaxNameLength = 200

// CheckName reports, as an error wrapping ErrInvalid, why s cannot name
// a queue, a job kind or a dependency (what says which): a name is 1 to
// MaxNameLength bytes of valid UTF-8 without control characters,
// bidirectional-text controls (which can make a name display as another),
// path separators ('/' and '\', names appear in URL paths and file
// names), or white space at either end.
func CheckName(what, s string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s %q %s", ErrInvalid, what, clipName(s), why) }
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is required", ErrInvalid, what)
	case len(s) > MaxNameLength:
		return fmt.Errorf("%w: %s is %d bytes long, the limit is %d", ErrInvalid, what, len(s), MaxNameLength)
	case !utf8.ValidString(s):
		return bad("is not valid UTF-8")
	case strings.TrimSpace(s) != s:
		return bad("starts or ends with white space")
	case strings.ContainsAny(s, `/\`):
		return bad(`holds a path separator ("/" or "\")`)
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return bad("holds a control character")
		case unicode.Is(unicode.Bidi_Control, r):
			return bad(fmt.Sprintf("holds the bidirectional-text control U+%04X", r))
		}
	}
	return nil
}

// clipName shortens a name quoted in an error.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
