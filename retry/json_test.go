package retry_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/retry"
)

// TestPolicyJSON: a policy encodes with its durations as text with their
// unit, decodes back to itself, and the earlier encoding (Go names,
// nanoseconds) still decodes.
func TestPolicyJSON(t *testing.T) {
	p := retry.DefaultPolicy()
	p.Initial = 1080 * time.Millisecond
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_retries":3,"initial":"1.08s","multiplier":2,"max_delay":"30s","jitter":"proportional",` +
		`"jitter_factor":0.1,"jitter_max":"500ms","max_retry_after":"1h0m0s"}`
	if string(b) != want {
		t.Errorf("Marshal: %s\nwant     %s", b, want)
	}
	var back retry.Policy
	if err := json.Unmarshal(b, &back); err != nil || back != p {
		t.Errorf("Unmarshal: %+v, %v; want %+v", back, err, p)
	}
	// A pointer field marshals the same way.
	if b2, _ := json.Marshal(&p); string(b2) != want {
		t.Errorf("Marshal(&p): %s", b2)
	}

	old := `{"MaxRetries":5,"Initial":1000000000,"Multiplier":2,"MaxDelay":30000000000,"Jitter":"full",` +
		`"JitterFactor":0,"JitterMax":0,"MaxRetryAfter":0}`
	var o retry.Policy
	if err := json.Unmarshal([]byte(old), &o); err != nil {
		t.Fatal(err)
	}
	if o.MaxRetries != 5 || o.Initial != time.Second || o.MaxDelay != 30*time.Second || o.Jitter != retry.JitterFull {
		t.Errorf("earlier encoding: %+v", o)
	}

	var partial retry.Policy
	if err := json.Unmarshal([]byte(`{"max_retries":1,"initial":"250ms"}`), &partial); err != nil ||
		partial != (retry.Policy{MaxRetries: 1, Initial: 250 * time.Millisecond}) {
		t.Errorf("partial: %+v, %v", partial, err)
	}
	for _, bad := range []string{`{"initial":"soon"}`, `{"initial":5}`, `[]`} {
		var x retry.Policy
		if err := json.Unmarshal([]byte(bad), &x); err == nil {
			t.Errorf("%s: decoded as %+v, want an error", bad, x)
		} else if !strings.Contains(err.Error(), "policy") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestPolicyJSONRoundTrip: every field survives a round trip, also
// durations finer than a millisecond and an undeclared jitter's refusal.
func TestPolicyJSONRoundTrip(t *testing.T) {
	p := retry.Policy{MaxRetries: 7, Initial: 1500 * time.Microsecond, Multiplier: 1.5, MaxDelay: 90 * time.Minute,
		Jitter: retry.JitterAdditive, JitterFactor: 0.25, JitterMax: 3 * time.Nanosecond, MaxRetryAfter: 2 * time.Hour}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back retry.Policy
	if err := json.Unmarshal(b, &back); err != nil || back != p {
		t.Errorf("round trip of %s: %+v, %v; want %+v", b, back, err, p)
	}
	if _, err := json.Marshal(retry.Policy{Jitter: retry.Jitter(200)}); err == nil {
		t.Error("an undeclared jitter marshaled")
	}
}
