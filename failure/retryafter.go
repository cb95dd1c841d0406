package failure

import (
	"net/http"
	"strings"
	"time"
)

// MaxRetryAfter is the largest delay ParseRetryAfter returns and Classify
// reports: 30 days. Larger values are clamped to it. Callers typically clamp
// further to their own policy.
const MaxRetryAfter = 30 * 24 * time.Hour

// ParseRetryAfter parses the value of an HTTP Retry-After header and
// returns how long to wait from now.
//
// The value is either a number of seconds ("120", also a decimal such as
// "1.5", rounded up to the millisecond) or an HTTP date in any of the three
// formats net/http accepts ("Sun, 06 Nov 1994 08:49:37 GMT", its RFC 850
// and ANSI C forms). Surrounding white space is ignored. now is passed in
// so that the result is deterministic; use time.Now() in production.
//
// A negative number or a date in the past gives (0, true): retry at once.
// Values beyond MaxRetryAfter, including ones that overflow, give
// (MaxRetryAfter, true). An empty or unparsable value gives (0, false).
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, false
	}
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// Sub saturates instead of overflowing, so clamping is enough.
	return clampRetryAfter(t.Sub(now)), true
}

// parseSeconds parses [+-]digits[.digits] (at least one digit in all) as
// seconds, saturating at MaxRetryAfter and rounding fractions up to the
// millisecond. Negative numbers give 0.
func parseSeconds(s string) (time.Duration, bool) {
	neg := false
	switch s[0] {
	case '+':
		s = s[1:]
	case '-':
		neg = true
		s = s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || !isDigits(whole) || !isDigits(frac) {
		return 0, false
	}
	if neg {
		return 0, true
	}
	const maxSeconds = int64(MaxRetryAfter / time.Second)
	var sec int64
	for i := 0; i < len(whole); i++ {
		sec = sec*10 + int64(whole[i]-'0')
		if sec > maxSeconds {
			return MaxRetryAfter, true
		}
	}
	var ms int64
	for i := 0; i < 3; i++ {
		ms *= 10
		if i < len(frac) {
			ms += int64(frac[i] - '0')
		}
	}
	if len(frac) > 3 && strings.Trim(frac[3:], "0") != "" {
		ms++ // round up what is left below the millisecond
	}
	return clampRetryAfter(time.Duration(sec)*time.Second + time.Duration(ms)*time.Millisecond), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
