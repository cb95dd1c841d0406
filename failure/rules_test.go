package failure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func mustClassifier(t *testing.T, cfg Config) *Classifier {
	t.Helper()
	c, err := NewClassifier(cfg)
	if err != nil {
		t.Fatalf("NewClassifier: %v", err)
	}
	return c
}

func TestRules(t *testing.T) {
	c := mustClassifier(t, Config{Rules: []Rule{
		{Class: Permanent, Contains: "Quota EXCEEDED"},
		{Class: Transient, Regexp: `^lock [a-z]+ held`},
		{Class: NeedsAuth, Regexp: `(?i)token expired`},
		{Class: Transient, Contains: "quota"}, // shadowed for "quota exceeded"
		{Class: Unknown, Contains: "maybe"},
		{Class: Permanent, Contains: "maybe not"}, // shadowed by the Unknown rule
		{Class: Permanent, Contains: "straße"},
	}})
	tests := []struct {
		err  error
		want Verdict
	}{
		{errors.New("quota exceeded for project x"), Verdict{Class: Permanent, Reason: "rule:Quota EXCEEDED"}},
		{errors.New("QUOTA EXCEEDED"), Verdict{Class: Permanent, Reason: "rule:Quota EXCEEDED"}},
		{errors.New("quota low"), Verdict{Class: Transient, Reason: "rule:quota"}},
		{errors.New("lock abc held by worker 3"), Verdict{Class: Transient, Reason: "rule:^lock [a-z]+ held"}},
		{errors.New("LOCK abc held"), Verdict{Class: Unknown, Reason: ReasonUnknown}}, // regexps are case-sensitive
		{errors.New("x: lock abc held"), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{errors.New("Token Expired at 12:00"), Verdict{Class: NeedsAuth, Reason: "rule:(?i)token expired"}},
		{errors.New("maybe not"), Verdict{Class: Unknown, Reason: "rule:maybe"}},
		{errors.New("STRASSE"), Verdict{Class: Unknown, Reason: ReasonUnknown}},
		{errors.New("Straße gesperrt"), Verdict{Class: Permanent, Reason: "rule:straße"}},
		{fmt.Errorf("job 9: %w", errors.New("quota exceeded")), Verdict{Class: Permanent, Reason: "rule:Quota EXCEEDED"}},
		{errors.Join(errors.New("a"), errors.New("lock abc held")), Verdict{Class: Unknown, Reason: ReasonUnknown}}, // ^ is the start of the whole message
		// Earlier stages win over rules.
		{Wrap(Transient, errors.New("quota exceeded")), Verdict{Class: Transient, Reason: ReasonExplicit}},
		{&StatusError{Code: 503, Body: "quota exceeded"}, Verdict{Class: Transient, Reason: "http_503"}},
		{fmt.Errorf("quota exceeded: %w", context.Canceled), Verdict{Class: Transient, Reason: ReasonCanceled}},
		// A status that does not decide lets the rules see the message.
		{&StatusError{Code: 302, Body: "quota exceeded"}, Verdict{Class: Permanent, Reason: "rule:Quota EXCEEDED"}},
		{&StatusError{Code: 302, Body: "fine"}, Verdict{Class: Unknown, Reason: "http_302"}},
		{nil, Verdict{Class: Unknown, Reason: ReasonNone}},
	}
	for _, tt := range tests {
		if got := c.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %+v, want %+v", tt.err, got, tt.want)
		}
	}
}

func TestNilAndZeroClassifier(t *testing.T) {
	var nilC *Classifier
	zero := mustClassifier(t, Config{})
	for _, err := range []error{nil, errors.New("timeout"), &StatusError{Code: 429}, context.Canceled, Wrap(Permanent, nil)} {
		want := Classify(err)
		if got := nilC.Classify(err); got != want {
			t.Errorf("nil Classifier: %+v, want %+v", got, want)
		}
		if got := zero.Classify(err); got != want {
			t.Errorf("zero Classifier: %+v, want %+v", got, want)
		}
	}
}

func TestNewClassifierErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{"empty rule", Config{Rules: []Rule{{Class: Transient, Contains: "ok"}, {Class: Permanent}}},
			[]string{"rule 1 (empty)", "neither Contains nor Regexp"}},
		{"both fields", Config{Rules: []Rule{{Class: Permanent, Contains: "a", Regexp: "b"}}},
			[]string{`rule 0 (contains "a", regexp "b")`, "both Contains and Regexp"}},
		{"bad regexp", Config{Rules: []Rule{{Class: Permanent, Contains: "x"}, {Class: Permanent, Contains: "y"}, {Class: Transient, Regexp: "a(b"}}},
			[]string{`rule 2 (regexp "a(b")`, "invalid regexp", "missing closing )"}},
		{"undefined class", Config{Rules: []Rule{{Class: Class(9), Contains: "boom"}}},
			[]string{`rule 0 (contains "boom")`, "undefined class 9"}},
		{"status class", Config{Status: map[int]Class{503: Class(42)}},
			[]string{"status override 503", "undefined class 42"}},
		{"status code", Config{Status: map[int]Class{5003: Transient}},
			[]string{"status override 5003", "not an HTTP status code"}},
		{"several at once", Config{Status: map[int]Class{42: Permanent}, Rules: []Rule{{}, {Class: Transient, Regexp: "*"}}},
			[]string{"status override 42", "rule 0 (empty)", `rule 1 (regexp "*")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClassifier(tt.cfg)
			if err == nil || c != nil {
				t.Fatalf("NewClassifier = %v, %v; want an error", c, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestNewClassifierCopiesConfig(t *testing.T) {
	cfg := Config{
		Status: map[int]Class{404: Transient},
		Rules:  []Rule{{Class: Permanent, Contains: "boom"}},
	}
	c := mustClassifier(t, cfg)
	cfg.Status[404] = NeedsAuth
	cfg.Rules[0] = Rule{Class: Transient, Contains: "boom"}
	if got := c.Classify(&StatusError{Code: 404}); got.Class != Transient {
		t.Errorf("status override changed after NewClassifier: %+v", got)
	}
	if got := c.Classify(errors.New("boom")); got.Class != Permanent {
		t.Errorf("rule changed after NewClassifier: %+v", got)
	}
}

func TestCommonMessageRules(t *testing.T) {
	c := mustClassifier(t, Config{Rules: CommonMessageRules()})
	tests := []struct {
		msg    string
		class  Class
		reason string
	}{
		// The retryable messages such lists hold.
		{"rpc error: context deadline exceeded", Transient, "rule:context deadline exceeded"},
		{"dial qdrant: connection refused", Transient, "rule:connection refused"},
		{"LLM call timeout after 30s", Transient, "rule:timeout"},
		{"Temporary failure in name resolution", Transient, "rule:temporary failure"},
		{"provider: rate limited, try later", RateLimited, "rule:rate limited"},
		{"upstream timeout", Transient, "rule:timeout"}, // "timeout" comes first
		{"upstream rate limit reached", RateLimited, "rule:upstream rate limit"},
		// The non-retryable messages such lists hold.
		{"invalid argument: cv_id is empty", Permanent, "rule:invalid argument"},
		{"job 12 not found", Permanent, "rule:not found"},
		{"Conflict: job already evaluated", Permanent, "rule:conflict"},
		{"response schema invalid: missing score", Permanent, "rule:schema invalid"},
		{"Authentication failed: bad API key", NeedsAuth, "rule:authentication failed"},
		{"authorization failed for tenant 3", NeedsAuth, "rule:authorization failed"},
		// Retryable patterns are checked first.
		{"timeout while checking: model not found", Transient, "rule:timeout"},
		// Anything else stays Unknown, which is retried.
		{"disk full", Unknown, ReasonUnknown},
	}
	for _, tt := range tests {
		got := c.Classify(errors.New(tt.msg))
		if got.Class != tt.class || got.Reason != tt.reason {
			t.Errorf("Classify(%q) = %+v, want %v %q", tt.msg, got, tt.class, tt.reason)
		}
		// The retry decision matches a plain retryable/non-retryable list's: retryable unless listed
		// as non-retryable.
		if listRetryable(tt.msg) != got.Class.Retryable() {
			t.Errorf("Classify(%q) retryable = %v, the plain list says %v", tt.msg, got.Class.Retryable(), !got.Class.Retryable())
		}
	}
	// Each call returns a fresh slice.
	a := CommonMessageRules()
	a[0].Contains = "changed"
	if CommonMessageRules()[0].Contains == "changed" {
		t.Error("CommonMessageRules shares its slice")
	}
}

// listRetryable is a plain retryable/non-retryable decision over the same
// lists, without attempt limits.
func listRetryable(msg string) bool {
	retryable := []string{"context deadline exceeded", "connection refused", "timeout", "temporary failure",
		"rate limited", "upstream timeout", "upstream rate limit"}
	nonRetryable := []string{"invalid argument", "not found", "conflict", "schema invalid",
		"authentication failed", "authorization failed"}
	lower := strings.ToLower(msg)
	for _, s := range retryable {
		if strings.Contains(lower, s) {
			return true
		}
	}
	for _, s := range nonRetryable {
		if strings.Contains(lower, s) {
			return false
		}
	}
	return true
}
