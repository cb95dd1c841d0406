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

// FuzzErrorPrefixCover checks the cover of a cause against its errors:
// for any set of errors and prefix, CoverAll means each starts with the
// prefix, CoverNone that none does, judged from the bounds of the
// errors' keys alone.
func FuzzErrorPrefixCover(f *testing.F) {
	long := strings.Repeat("x", store.ErrorPrefixKeyLen)
	for _, c := range [][4]string{
		{"conn", "connection refused", "connection reset", ""},
		{"connection r", "connection refused", "connection reset", ""},
		{"Conn", "connection refused", "conn", ""},
		{"é", "é 1", "ê", "é"},
		{"\uD7FF", "\uD7FF", "\uE000", ""},
		{"\U0010FFFF", "\U0010FFFF a", "\U0010FFFF", ""},
		{long, long + "a", long + "b", ""},
		{long + "a", long + "a", long + "b", ""},
		{"a", "", "a", "ab"},
	} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, p, a, b, c string) {
		if p == "" || store.CheckErrorPrefix(p) != nil {
			return
		}
		errs := []string{a, b, c}
		for _, e := range errs {
			if !utf8.ValidString(e) {
				return
			}
		}
		lo, hi := key(a), key(a)
		all, none := true, true
		for _, e := range errs {
			lo, hi = min(lo, key(e)), max(hi, key(e))
			if strings.HasPrefix(e, p) {
				none = false
			} else {
				all = false
			}
		}
		switch got := store.ErrorPrefixCover(p, lo, hi); {
		case got == store.CoverAll && !all:
			t.Fatalf("ErrorPrefixCover(%q, %q, %q) = all; errors %q", p, lo, hi, errs)
		case got == store.CoverNone && !none:
			t.Fatalf("ErrorPrefixCover(%q, %q, %q) = none; errors %q", p, lo, hi, errs)
		}
	})
}

// TestErrorPrefixCover: the cover decides where bounds allow it, so that
// counts need not read jobs.
func TestErrorPrefixCover(t *testing.T) {
	long := strings.Repeat("x", store.ErrorPrefixKeyLen)
	for _, c := range []struct {
		p, lo, hi string
		want      store.ErrorCover
	}{
		{"conn", "connection refused", "connection reset", store.CoverAll},
		{"connection re", "connection refused", "connection reset", store.CoverAll},
		{"connection ref", "connection refused", "connection reset", store.CoverSome},
		{"Conn", "connection refused", "connection reset", store.CoverNone},
		{"d", "connection refused", "connection reset", store.CoverNone},
		{"conn", "", "connection", store.CoverSome}, // an error of none
		{long, long, long, store.CoverAll},
		{long + "a", long, long, store.CoverSome}, // the key alone cannot tell
		{long + "a", "y", "z", store.CoverNone},
		{"x", "z", "a", store.CoverSome}, // not bounds
	} {
		if got := store.ErrorPrefixCover(c.p, c.lo, c.hi); got != c.want {
			t.Errorf("ErrorPrefixCover(%.20q, %.20q, %.20q) = %d, want %d", c.p, c.lo, c.hi, got, c.want)
		}
	}
	cs := []store.CauseBounds{
		{Fingerprint: "a", N: 3, Lo: "timeout 1", Hi: "timeout 9", Known: true},
		{Fingerprint: "a", N: 2, Lo: "timeout after 1", Hi: "timeout after 2", Known: true},
		{Fingerprint: "b", N: 4, Lo: "refused", Hi: "refused", Known: true},
		{Fingerprint: "c", N: 0, Known: false},
	}
	by, matched, total, exact := store.PrefixCounts(cs, "timeout")
	if by["a"] != 5 || len(by) != 1 || matched != 5 || total != 9 || !exact {
		t.Errorf("PrefixCounts(timeout) = %v, %d, %d, %v", by, matched, total, exact)
	}
	cs[3].N = 1 // a cause without bounds must be read
	if _, _, _, exact := store.PrefixCounts(cs, "timeout"); exact {
		t.Error("PrefixCounts with a cause of unknown bounds is exact")
	}
	for _, c := range []struct {
		size  int
		total int64
		want  int64
	}{{50, 1_000_000, 7142}, {50, 0, 1}, {1, 1, 2}, {100, 100_000, 3179}} {
		if got := store.ErrorPrefixFew(c.size, c.total); got != c.want {
			t.Errorf("ErrorPrefixFew(%d, %d) = %d, want %d", c.size, c.total, got, c.want)
		}
	}
}
