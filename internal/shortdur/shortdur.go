// Package shortdur words a duration the way redrive's messages and
// explanations show it: time.Duration.String without the zero minutes
// and seconds of round values.
package shortdur

import (
	"strings"
	"time"
)

// String is d.String() without the zero minutes and seconds of round
// values: "1h" rather than "1h0m0s", "2m" rather than "2m0s", "1h30m"
// rather than "1h30m0s"; other durations as time.Duration prints them.
func String(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
