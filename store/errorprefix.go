package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrorPrefixKeyLen is how many characters of a dead job's last error the
// stores index for Filter.ErrorPrefix (SQLite migration 0041's
// substr(last_error, 1, 200), PostgreSQL's left(last_error, 200)): a
// longer error is found by its first 200 characters, then checked whole.
const ErrorPrefixKeyLen = 200

// CheckErrorPrefix validates Filter.ErrorPrefix: valid UTF-8 without NUL
// bytes (text both stores can compare). Its error wraps ErrInvalid.
func CheckErrorPrefix(p string) error {
	if !utf8.ValidString(p) {
		return fmt.Errorf("%w: error prefix is not valid UTF-8", ErrInvalid)
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: error prefix contains a NUL byte", ErrInvalid)
	}
	return nil
}

// ErrorPrefixRange returns the range of index keys (an error's first
// ErrorPrefixKeyLen characters) that holds every error starting with p, in
// byte order (code point order for UTF-8): the keys equal to lo when eq,
// else those from lo (inclusive) to hi (exclusive; no upper bound when hi
// is ""). p must pass CheckErrorPrefix and not be empty.
func ErrorPrefixRange(p string) (lo, hi string, eq bool) {
	if utf8.RuneCountInString(p) >= ErrorPrefixKeyLen {
		// Every such error's key is p's first ErrorPrefixKeyLen
		// characters.
		n := 0
		for i := range p {
			if n == ErrorPrefixKeyLen {
				return p[:i], "", true
			}
			n++
		}
		return p, "", true
	}
	// The keys that start with p are those from p up to, not including,
	// p with its last character replaced by the next one: UTF-8 is
	// prefix-free and its byte order is the order of code points.
	rs := []rune(p)
	for len(rs) > 0 {
		last := rs[len(rs)-1]
		switch {
		case last == utf8.MaxRune:
			rs = rs[:len(rs)-1]
			continue
		case last == 0xD7FF: // the next code point, past the surrogates
			rs[len(rs)-1] = 0xE000
		default:
			rs[len(rs)-1] = last + 1
		}
		return p, string(rs), false
	}
	return p, "", false
}
