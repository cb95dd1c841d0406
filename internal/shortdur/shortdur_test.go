package shortdur

import (
	"testing"
	"time"
)

func TestString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                   "0s",
		900 * time.Millisecond:              "900ms",
		time.Second:                         "1s",
		1500 * time.Millisecond:             "1.5s",
		90 * time.Second:                    "1m30s",
		2*time.Hour + 1500*time.Millisecond: "2h0m1.5s",
		2 * time.Minute:                     "2m",
		time.Hour:                           "1h",
		90 * time.Minute:                    "1h30m",
		time.Hour + time.Second:             "1h0m1s",
		-5 * time.Minute:                    "-5m",
		26*time.Hour + 3*time.Minute + 4e9:  "26h3m4s",
	} {
		if got := String(d); got != want {
			t.Errorf("String(%v) = %q, want %q", int64(d), got, want)
		}
	}
}
