package store

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength bounds the names CheckName accepts, in bytes.
const MaxNameLength = 200

// CheckName reports, as an error wrapping ErrInvalid, why s cannot name
// a queue, a job kind, a dependency or breaker, a schedule or a limit
// (what says which). It is the one rule for every name an operator or a
// client gives: 1 to MaxNameLength bytes of valid UTF-8, every character
// visible or a space (no control characters, no zero-width or other
// format characters such as U+200D or the bidirectional-text controls,
// which make a name display as another or as nothing; no other
// default-ignorable characters such as the Hangul filler U+3164, no
// variation selector except after a symbol (an emoji's), at least one
// character that is not a mark or a blank such as U+2800; no unassigned
// or private-use code points), no white space at either end, and nothing
// path-like: no '/' or '\' and not "." or ".." (names appear in URL paths
// and file names).
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
	case s == "." || s == "..":
		return bad("looks like a path")
	}
	visible := false
	prev := rune(-1)
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return bad("holds a control character")
		case unicode.Is(unicode.Bidi_Control, r):
			return bad(fmt.Sprintf("holds the bidirectional-text control U+%04X", r))
		case !unicode.IsGraphic(r):
			return bad(fmt.Sprintf("holds U+%04X, which cannot be seen (a format, unassigned or private-use character)", r))
		case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r):
			return bad(fmt.Sprintf("holds U+%04X, which cannot be seen (a filler or joiner)", r))
		case unicode.Is(unicode.Variation_Selector, r) && (prev < 0 || !unicode.Is(unicode.So, prev)):
			// An emoji's presentation selector (U+2764 U+FE0F) is
			// seen; after a letter, a selector changes nothing seen.
			return bad(fmt.Sprintf("holds the variation selector U+%04X after no symbol", r))
		}
		if !unicode.IsSpace(r) && !unicode.In(r, unicode.Mn, unicode.Me) && r != '\u2800' {
			visible = true
		}
		prev = r
	}
	if !visible {
		return bad("has no visible character (only marks or blanks)")
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
