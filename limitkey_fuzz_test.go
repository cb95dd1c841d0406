package redrive

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// FuzzKeyNumber: the group of a JSON number is its own group (the form
// is canonical), has the value of the number, and is plain decimal when
// short.
func FuzzKeyNumber(f *testing.F) {
	for _, s := range []string{"5", "5.0", "-0", "1e3", "12.5e-3", "1e300", "-1.5e-300", "0.000", "123456789012345678901234567890", "1E+2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n json.Number
		if len(s) == 0 || s != strings.TrimSpace(s) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || json.Unmarshal([]byte(s), &n) != nil {
			return // not a JSON number
		}
		got, err := keyNumber(s)
		if err != nil {
			return // an exponent beyond the bound
		}
		again, err := keyNumber(got)
		if err != nil || again != got {
			t.Fatalf("keyNumber(%q) = %q, whose group is %q, %v", s, got, again, err)
		}
		if !json.Valid([]byte(got)) {
			t.Fatalf("keyNumber(%q) = %q, not a JSON number", s, got)
		}
		a, errA := strconv.ParseFloat(s, 64)
		b, errB := strconv.ParseFloat(got, 64)
		if errA == nil && errB == nil && a != b && !(a == 0 && b == 0) {
			t.Fatalf("keyNumber(%q) = %q: %v, want %v", s, got, b, a)
		}
		if d, e, ok := strings.Cut(strings.TrimPrefix(got, "-"), "e"); ok {
			n, err := strconv.Atoi(e)
			if err != nil {
				t.Fatalf("keyNumber(%q) = %q: bad exponent", s, got)
			}
			point := len(d) + n
			if (n >= 0 && point <= 40) || (n < 0 && (point > 0 || -point+len(d) <= 40)) {
				t.Fatalf("keyNumber(%q) = %q: a short number in exponent form", s, got)
			}
		}
	})
}
