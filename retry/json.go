package retry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// policyJSON is a Policy as JSON: snake_case names, as in redrive serve's
// "retry" configuration, and durations as text with their unit ("1.5s"),
// never bare nanoseconds.
type policyJSON struct {
	MaxRetries    int     `json:"max_retries"`
	Initial       string  `json:"initial"`
	Multiplier    float64 `json:"multiplier"`
	MaxDelay      string  `json:"max_delay"`
	Jitter        Jitter  `json:"jitter"`
	JitterFactor  float64 `json:"jitter_factor"`
	JitterMax     string  `json:"jitter_max"`
	MaxRetryAfter string  `json:"max_retry_after"`
	// The Retry-After jitter, absent when zero (the defaults), so that
	// the JSON of a policy that leaves them alone reads as before.
	// "off" is NoRetryAfterJitter.
	RetryAfterJitter       string  `json:"retry_after_jitter,omitempty"`
	RetryAfterJitterFactor float64 `json:"retry_after_jitter_factor,omitempty"`
}

// MarshalJSON writes the policy with snake_case names and its durations as
// text with their unit, e.g. {"max_retries":3,"initial":"1s",
// "multiplier":2,"max_delay":"30s","jitter":"proportional",...}: a job's
// policy is shown by the API and the CLI as stored.
func (p Policy) MarshalJSON() ([]byte, error) {
	v := policyJSON{
		MaxRetries: p.MaxRetries, Initial: p.Initial.String(), Multiplier: p.Multiplier,
		MaxDelay: p.MaxDelay.String(), Jitter: p.Jitter, JitterFactor: p.JitterFactor,
		JitterMax: p.JitterMax.String(), MaxRetryAfter: p.MaxRetryAfter.String(),
		RetryAfterJitterFactor: p.RetryAfterJitterFactor,
	}
	switch p.RetryAfterJitter {
	case 0:
	case NoRetryAfterJitter:
		v.RetryAfterJitter = "off"
	default:
		v.RetryAfterJitter = p.RetryAfterJitter.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes (absent fields are zero),
// and the encoding of earlier versions, with Go field names and durations
// in nanoseconds, which stored jobs may still hold.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var v policyJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		// The earlier encoding: Go field names, nanoseconds.
		if legacyPolicy(b) {
			type plain Policy
			var old plain
			if json.Unmarshal(b, &old) == nil {
				*p = Policy(old)
				return nil
			}
		}
		return fmt.Errorf("retry: policy: %w", err)
	}
	out := Policy{MaxRetries: v.MaxRetries, Multiplier: v.Multiplier, Jitter: v.Jitter, JitterFactor: v.JitterFactor,
		RetryAfterJitterFactor: v.RetryAfterJitterFactor}
	if v.RetryAfterJitter == "off" {
		out.RetryAfterJitter = NoRetryAfterJitter
		v.RetryAfterJitter = ""
	}
	for _, f := range []struct {
		name, s string
		d       *time.Duration
	}{
		{"initial", v.Initial, &out.Initial}, {"max_delay", v.MaxDelay, &out.MaxDelay},
		{"jitter_max", v.JitterMax, &out.JitterMax}, {"max_retry_after", v.MaxRetryAfter, &out.MaxRetryAfter},
		{"retry_after_jitter", v.RetryAfterJitter, &out.RetryAfterJitter},
	} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return fmt.Errorf("retry: policy: %s: %w", f.name, err)
		}
		*f.d = d
	}
	*p = out
	return nil
}

// legacyPolicy reports whether b is a JSON object with a key of the
// earlier encoding: a Policy field's Go name, exactly.
func legacyPolicy(b []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	for _, k := range []string{"MaxRetries", "Initial", "Multiplier", "MaxDelay", "Jitter", "JitterFactor", "JitterMax", "MaxRetryAfter",
		"RetryAfterJitter", "RetryAfterJitterFactor"} {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}
