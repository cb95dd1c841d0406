package failure

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestClassNames(t *testing.T) {
	tests := []struct {
		c         Class
		name      string
		retryable bool
	}{
		{None, "none", true},
		{Unknown, "unknown", true},
		{Transient, "transient", true},
		{RateLimited, "rate_limited", true},
		{Permanent, "permanent", false},
		{NeedsAuth, "needs_auth", false},
		{Class(17), "class(17)", true},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.name {
			t.Errorf("Class(%d).String() = %q, want %q", uint8(tt.c), got, tt.name)
		}
		if got := tt.c.Retryable(); got != tt.retryable {
			t.Errorf("%v.Retryable() = %v, want %v", tt.c, got, tt.retryable)
		}
	}
	if len(Classes) != 5 {
		t.Errorf("Classes has %d entries", len(Classes))
	}
}

func TestParseClass(t *testing.T) {
	tests := []struct {
		in   string
		want Class
	}{
		{"unknown", Unknown}, {"Transient", Transient}, {"rate_limited", RateLimited},
		{"RateLimited", RateLimited}, {"rate-limited", RateLimited}, {"PERMANENT", Permanent},
		{"needs_auth", NeedsAuth}, {"NeedsAuth", NeedsAuth}, {"needs-auth", NeedsAuth},
	}
	for _, tt := range tests {
		got, err := ParseClass(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseClass(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "none", "None", "fatal", "class(17)", "transient "} {
		if _, err := ParseClass(bad); err == nil {
			t.Errorf("ParseClass(%q) succeeded", bad)
		}
	}
	for _, c := range Classes {
		if got, err := ParseClass(c.String()); err != nil || got != c {
			t.Errorf("ParseClass(%v.String()) = %v, %v", c, got, err)
		}
	}
}

func TestClassJSON(t *testing.T) {
	type row struct {
		Class Class `json:"class"`
	}
	for _, c := range append([]Class{None}, Classes...) {
		b, err := json.Marshal(row{c})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"class":"` + c.String() + `"}`; string(b) != want {
			t.Errorf("Marshal = %s, want %s", b, want)
		}
		var back row
		if err := json.Unmarshal(b, &back); err != nil || back.Class != c {
			t.Errorf("Unmarshal(%s) = %v, %v", b, back.Class, err)
		}
	}
	var r row
	if err := json.Unmarshal([]byte(`{"class":"bogus"}`), &r); err == nil {
		t.Error("Unmarshal accepted an unknown class")
	}
}

// TestNone: the zero Class is None, which names no failure: Classify never
// returns it and treats an explicit None as Unknown; rules and status
// overrides refuse it; a struct field tagged omitzero leaves it out.
func TestNone(t *testing.T) {
	var zero Class
	if zero != None {
		t.Fatalf("zero Class is %v, want none", zero)
	}
	for _, c := range Classes {
		if c == None {
			t.Error("Classes lists None")
		}
	}
	if v := Classify(Wrap(None, errors.New("boom"))); v.Class != Unknown || v.Reason != ReasonExplicit {
		t.Errorf("Classify(Wrap(None, err)) = %+v, want explicit unknown", v)
	}
	if v := Classify(errors.New("boom")); v.Class != Unknown {
		t.Errorf("Classify(plain error) = %+v, want unknown", v)
	}
	if _, err := NewClassifier(Config{Rules: []Rule{{Contains: "boom"}}}); err == nil || !strings.Contains(err.Error(), "no class") {
		t.Errorf("a rule without a class: %v, want a refusal saying it has no class", err)
	}
	if _, err := NewClassifier(Config{Status: map[int]Class{418: None}}); err == nil || !strings.Contains(err.Error(), "no class") {
		t.Errorf("a status override without a class: %v, want a refusal saying it has no class", err)
	}
	type job struct {
		Class Class `json:"class,omitzero"`
	}
	for c, want := range map[Class]string{None: `{}`, Unknown: `{"class":"unknown"}`} {
		if b, err := json.Marshal(job{c}); err != nil || string(b) != want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", c, b, err, want)
		}
	}
}
