package store

import (
	"fmt"
	"math"
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

// ErrorCover is how the dead jobs of one cause stand to an error prefix,
// judged from the bounds of their errors' keys.
type ErrorCover int8

const (
	// CoverNone: no job of the cause has an error starting with the
	// prefix.
	CoverNone ErrorCover = iota
	// CoverAll: every job of the cause has.
	CoverAll
	// CoverSome: some may have; the cause's jobs must be read to know.
	CoverSome
)

// ErrorPrefixCover returns how the dead jobs of a cause whose errors'
// keys (their first ErrorPrefixKeyLen characters, "" for none) all lie
// between lo and hi, inclusive, in byte order, stand to the prefix p
// (not empty, passing CheckErrorPrefix).
func ErrorPrefixCover(p, lo, hi string) ErrorCover {
	rlo, rhi, eq := ErrorPrefixRange(p)
	switch {
	case lo > hi:
		return CoverSome // not bounds
	case hi < rlo:
		return CoverNone
	case eq:
		// The keys equal to rlo; an error whose key it is starts with p
		// only when p is no longer than a key.
		if lo > rlo {
			return CoverNone
		}
		if lo == rlo && hi == rlo && utf8.RuneCountInString(p) == ErrorPrefixKeyLen {
			return CoverAll
		}
		return CoverSome
	case rhi == "":
		// p is all U+10FFFF: rare enough to read.
		return CoverSome
	case lo >= rhi:
		return CoverNone
	case lo >= rlo && hi < rhi:
		return CoverAll
	}
	return CoverSome
}

// CauseBounds is what a store keeps of one cause of death (a row of its
// counted causes): its fingerprint, how many jobs died of it, and bounds
// of their errors' keys (Known false: none kept).
type CauseBounds struct {
	Fingerprint string
	N           int64
	Lo, Hi      string
	Known       bool
}

// PrefixCounts sums the dead jobs of the causes cs whose errors all
// start with p (p not empty, passing CheckErrorPrefix): by fingerprint,
// their sum (matched), and the sum of every cause's jobs (total). exact
// is false when some cause may hold jobs of both kinds (or has no
// bounds): then only a count of the jobs answers.
func PrefixCounts(cs []CauseBounds, p string) (byFingerprint map[string]int64, matched, total int64, exact bool) {
	byFingerprint = map[string]int64{}
	exact = true
	for _, c := range cs {
		total += c.N
		if c.N == 0 {
			continue
		}
		cover := CoverSome
		if c.Known {
			cover = ErrorPrefixCover(p, c.Lo, c.Hi)
		}
		switch cover {
		case CoverAll:
			byFingerprint[c.Fingerprint] += c.N
			matched += c.N
		case CoverSome:
			exact = false
		}
	}
	return byFingerprint, matched, total, exact
}

// PrefixCauseOnly reports whether f has an ErrorPrefix and otherwise
// narrows jobs by the fields of their cause only (CauseOnly): a store
// answers the counts of such a filter of dead jobs from the bounds of
// its causes' errors, when they decide.
func (f Filter) PrefixCauseOnly() bool {
	g := f
	g.ErrorPrefix = ""
	return f.ErrorPrefix != "" && g.CauseOnly()
}

// ErrorPrefixFew is where a dead-only listing by error prefix changes
// plans: fewer matching jobs than this, and a page sorts the prefix's
// range of the error index; more, and it walks the newest dead jobs
// (total of them, under the filter's other fields), which finds a page
// of size among the first size x total/matching. The two costs meet at
// the square root of (size+1) x total.
func ErrorPrefixFew(size int, total int64) int64 {
	if total <= 0 || size <= 0 {
		return 1
	}
	v := float64(size+1) * float64(total)
	return max(1, int64(math.Ceil(math.Sqrt(v))))
}
