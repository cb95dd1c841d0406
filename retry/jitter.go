package retry

import (
	"fmt"
	"strings"
)

// Jitter selects how a backoff delay d is randomised. The zero value is
// JitterNone.
type Jitter uint8

// The jitter kinds. In the formulas, d is the capped base delay
// min(Initial*Multiplier^n, MaxDelay) and rand(a, b) is uniform in [a, b).
const (
	// JitterNone uses d as is.
	JitterNone Jitter = iota
	// JitterProportional spreads the delay by a fraction of itself:
	// d * (1 + rand(-f, +f)), where f is Policy.JitterFactor.
	JitterProportional
	// JitterFull picks any delay up to d: rand(0, d).
	JitterFull
	// JitterEqual keeps half of d and randomises the other half:
	// d/2 + rand(0, d/2).
	JitterEqual
	// JitterDecorrelated ignores the exponential base and walks from the
	// previous delay: min(MaxDelay, rand(Initial, 3*prev)), with prev =
	// Initial for the first retry.
	JitterDecorrelated
	// JitterAdditive adds a bounded random amount: d + rand(0, JitterMax).
	JitterAdditive
)

var jitterNames = [...]string{
	JitterNone:         "none",
	JitterProportional: "proportional",
	JitterFull:         "full",
	JitterEqual:        "equal",
	JitterDecorrelated: "decorrelated",
	JitterAdditive:     "additive",
}

// String returns the jitter kind's name: "none", "proportional", "full",
// "equal", "decorrelated" or "additive".
func (j Jitter) String() string {
	if int(j) < len(jitterNames) {
		return jitterNames[j]
	}
	return fmt.Sprintf("jitter(%d)", uint8(j))
}

// valid reports whether j is one of the declared kinds.
func (j Jitter) valid() bool { return int(j) < len(jitterNames) }

// ParseJitter parses a jitter name as produced by [Jitter.String]. Case and
// surrounding spaces are ignored.
func ParseJitter(s string) (Jitter, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for j, n := range jitterNames {
		if n == name {
			return Jitter(j), nil
		}
	}
	return JitterNone, fmt.Errorf("retry: unknown jitter %q (want none, proportional, full, equal, decorrelated or additive)", s)
}

// MarshalText implements encoding.TextMarshaler, so a Jitter appears by name
// in JSON, YAML or TOML configuration. It fails for an undeclared kind.
func (j Jitter) MarshalText() ([]byte, error) {
	if !j.valid() {
		return nil, fmt.Errorf("retry: cannot marshal unknown %s", j)
	}
	return []byte(j.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using [ParseJitter].
func (j *Jitter) UnmarshalText(b []byte) error {
	v, err := ParseJitter(string(b))
	if err != nil {
		return err
	}
	*j = v
	return nil
}
