package download_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/redrivehq/redrive/download"
)

// FuzzContentRange: the Content-Range parser never panics, and what it
// accepts is a range a 206 could mean: start and end both given or both
// absent, 0 <= start <= end, end below a known total, total -1 or more.
func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes 5-9/*", "bytes */10", "bytes 5-4/10", "bytes 0-10/10", "bytes */*",
		"bytes 9223372036854775806-9223372036854775806/9223372036854775807", "bytes -1-2/3", "bytes 1-2/-3", "bytes  1 - 2 / 3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, end, total, ok := download.ContentRange(s)
		if !ok {
			if start != -1 || end != -1 || total != -1 {
				t.Fatalf("%q refused with %d %d %d", s, start, end, total)
			}
			return
		}
		if !strings.HasPrefix(s, "bytes ") || total < -1 || (start < 0) != (end < 0) || start < -1 ||
			(start >= 0 && (end < start || (total >= 0 && end >= total))) {
			t.Fatalf("%q accepted as %d-%d/%d", s, start, end, total)
		}
	})
}

// FuzzParseS3Endpoint: the endpoint parser never panics, what it accepts
// is an http(s) scheme and a host without user information, and its
// refusals never show what stood before an "@" (keys put in the URL).
func FuzzParseS3Endpoint(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9000", "https://s3.eu-west-1.amazonaws.com/", "http://k:s@h", "ftp://AK:wJ/x+y@h",
		"http://h/p", "http://h?x", "http://[::1]:9000", "http://AK:S/E@h:9000/%zz", "h:9000", "", "http://@h", "http://a@b@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := download.ParseS3Endpoint(raw)
		if err == nil {
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" {
				t.Fatalf("%q accepted as %#v", raw, u)
			}
			return
		}
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			start := 0
			if i := strings.Index(raw, "://"); i >= 0 && i < at {
				start = i + 3
			}
			// Masked, the user information reads "•••@": the message
			// never holds it followed by its "@".
			if user := raw[start : at+1]; len(user) >= 6 && !strings.Contains(raw[:start], user) && strings.Contains(err.Error(), user) {
				t.Fatalf("%q: the error shows %q: %v", raw, user, err)
			}
		}
	})
}

// FuzzSanitize: a served name sanitised is one path element without
// control characters, dots or white space at its ends, at most 200
// bytes, and sanitize gives it back unchanged (the final name of a
// directory dest is accepted only so).
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"report.pdf", "../../etc/passwd", `a\b`, "report .\u00a0 .", "x\u2003. ", " .hidden", "\x00a", "CON",
		strings.Repeat("é", 150) + " .", "a/", ".", ".."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := download.Sanitize(s)
		if n == "" {
			return
		}
		if again := download.Sanitize(n); again != n {
			t.Fatalf("sanitize(%q) = %q, sanitize of that = %q", s, n, again)
		}
		first, _ := utf8.DecodeRuneInString(n)
		last, _ := utf8.DecodeLastRuneInString(n)
		if len(n) > 200 || strings.ContainsAny(n, `/\`) || strings.ContainsFunc(n, unicode.IsControl) || !utf8.ValidString(n) ||
			first == '.' || last == '.' || unicode.IsSpace(first) || unicode.IsSpace(last) {
			t.Fatalf("sanitize(%q) = %q", s, n)
		}
	})
}
