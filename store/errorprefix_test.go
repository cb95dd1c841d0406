package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redrivehq/redrive/store"
)

// key is an error's key in the stores' index: its first
// ErrorPrefixKeyLen characters.
func key(s string) string {
	n := 0
	for i := range s {
		if n == store.ErrorPrefixKeyLen {
			return s[:i]
		}
		n++
	}
	return s
}

// FuzzErrorPrefixRange checks the range against the model: a text that
// starts with the prefix has its key in the range; for a prefix shorter
// than the key, only those do (a longer one is checked whole).
func FuzzErrorPrefixRange(f *testing.F) {
	long := strings.Repeat("x", store.ErrorPrefixKeyLen)
	for _, c := range [][2]string{
		{"conn", "connection refused"}, {"conn", "Connection"}, {"é", "ê"}, {"\uD7FF", "\uE000"},
		{"\U0010FFFF", "\U0010FFFF\U0010FFFF"}, {"a\U0010FFFF", "b"}, {long, long + "y"}, {long + "z", long + "y"},
		{"\x7f", "\u0080"}, {"ab", "a"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, p, s string) {
		if p == "" || store.CheckErrorPrefix(p) != nil || !utf8.ValidString(s) {
			return
		}
		lo, hi, eq := store.ErrorPrefixRange(p)
		k := key(s)
		in := k == lo
		if !eq {
			in = k >= lo && (hi == "" || k < hi)
		}
		if !utf8.ValidString(lo) || !utf8.ValidString(hi) {
			t.Fatalf("ErrorPrefixRange(%q) = %q, %q: not UTF-8", p, lo, hi)
		}
		has := strings.HasPrefix(s, p)
		if has && !in {
			t.Fatalf("%q starts with %q but its key is outside [%q, %q) (eq %v)", s, p, lo, hi, eq)
		}
		if !has && in && !eq && hi != "" {
			t.Fatalf("%q does not start with %q but its key is in [%q, %q)", s, p, lo, hi)
		}
	})
}

func TestCheckErrorPrefix(t *testing.T) {
	for _, p := range []string{"bad \xff", "nul \x00"} {
		if err := store.CheckErrorPrefix(p); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CheckErrorPrefix(%q) = %v, want an error wrapping ErrInvalid", p, err)
		}
	}
	if err := store.CheckErrorPrefix("connection refused: é"); err != nil {
		t.Errorf("CheckErrorPrefix of a good prefix: %v", err)
	}
}

// An operation keeps its filter for binaries that may predate
// ErrorPrefix: one with it is refused.
func TestOperationErrorPrefixRefused(t *testing.T) {
	_, err := json.Marshal(store.OperationParams{Filter: store.Filter{ErrorPrefix: "conn"}})
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("marshal of an operation with an error prefix: %v, want an error wrapping ErrInvalid", err)
	}
}
