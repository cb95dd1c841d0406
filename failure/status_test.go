package failure

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestStatusClass(t *testing.T) {
	tests := []struct {
		codes []int
		want  Class
	}{
		// The HTTP status table of docs/design.md: retried 408, 429, 5xx; dead 4xx.
		{[]int{408, 500, 502, 503, 504}, Transient},
		{[]int{429}, RateLimited},
		{[]int{400, 404, 410, 422, 451, 501}, Permanent},
		{[]int{401, 403}, NeedsAuth},
		// Unlisted codes.
		{[]int{505, 507, 508, 511, 520, 599}, Transient},
		{[]int{402, 405, 406, 409, 411, 413, 415, 418, 425, 426, 428, 431, 499}, Permanent},
		{[]int{100, 101, 200, 201, 204, 206, 299, 301, 302, 304, 307, 308, 399}, Unknown},
		{[]int{-1, 0, 1, 99, 600, 700, 999, 1000, 1 << 30}, Unknown},
	}
	for _, tt := range tests {
		for _, code := range tt.codes {
			if got := StatusClass(code); got != tt.want {
				t.Errorf("StatusClass(%d) = %v, want %v", code, got, tt.want)
			}
		}
	}
}

func TestClassifyStatusError(t *testing.T) {
	tests := []struct {
		err  *StatusError
		want Verdict
	}{
		{&StatusError{Code: 408}, Verdict{Class: Transient, Reason: "http_408"}},
		{&StatusError{Code: 500}, Verdict{Class: Transient, Reason: "http_500"}},
		{&StatusError{Code: 502}, Verdict{Class: Transient, Reason: "http_502"}},
		{&StatusError{Code: 503}, Verdict{Class: Transient, Reason: "http_503"}},
		{&StatusError{Code: 504}, Verdict{Class: Transient, Reason: "http_504"}},
		{&StatusError{Code: 429}, Verdict{Class: RateLimited, Reason: "http_429"}},
		{&StatusError{Code: 429, RetryAfter: 30 * time.Second}, Verdict{Class: RateLimited, RetryAfter: 30 * time.Second, Reason: "http_429"}},
		{&StatusError{Code: 503, RetryAfter: 5 * time.Second}, Verdict{Class: RateLimited, RetryAfter: 5 * time.Second, Reason: "http_503"}},
		{&StatusError{Code: 503, RetryAfter: -5 * time.Second}, Verdict{Class: Transient, Reason: "http_503"}},
		{&StatusError{Code: 429, RetryAfter: -5 * time.Second}, Verdict{Class: RateLimited, Reason: "http_429"}},
		{&StatusError{Code: 429, RetryAfter: 1000 * time.Hour}, Verdict{Class: RateLimited, RetryAfter: MaxRetryAfter, Reason: "http_429"}},
		{&StatusError{Code: 500, RetryAfter: 5 * time.Second}, Verdict{Class: Transient, Reason: "http_500"}},
		{&StatusError{Code: 400}, Verdict{Class: Permanent, Reason: "http_400"}},
		{&StatusError{Code: 404}, Verdict{Class: Permanent, Reason: "http_404"}},
		{&StatusError{Code: 410}, Verdict{Class: Permanent, Reason: "http_410"}},
		{&StatusError{Code: 422}, Verdict{Class: Permanent, Reason: "http_422"}},
		{&StatusError{Code: 451}, Verdict{Class: Permanent, Reason: "http_451"}},
		{&StatusError{Code: 501}, Verdict{Class: Permanent, Reason: "http_501"}},
		{&StatusError{Code: 401}, Verdict{Class: NeedsAuth, Reason: "http_401"}},
		{&StatusError{Code: 403}, Verdict{Class: NeedsAuth, Reason: "http_403"}},
		{&StatusError{Code: 418}, Verdict{Class: Permanent, Reason: "http_418"}},
		{&StatusError{Code: 507}, Verdict{Class: Transient, Reason: "http_507"}},
		{&StatusError{Code: 200}, Verdict{Class: Unknown, Reason: "http_200"}},
		{&StatusError{Code: 304}, Verdict{Class: Unknown, Reason: "http_304"}},
		{&StatusError{Code: 0}, Verdict{Class: Unknown, Reason: "http_0"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err.Code), func(t *testing.T) {
			for _, err := range []error{tt.err, fmt.Errorf("call: %w", tt.err), errors.Join(errors.New("a"), tt.err)} {
				if got := Classify(err); got != tt.want {
					t.Errorf("Classify(%v) = %+v, want %+v", err, got, tt.want)
				}
			}
		})
	}
}

func TestStatusOverrides(t *testing.T) {
	c, err := NewClassifier(Config{Status: map[int]Class{
		404: Transient,   // eventually-consistent store: not found yet
		503: Transient,   // ignore Retry-After on 503
		409: RateLimited, // a lock held elsewhere
		302: Permanent,   // redirects mean misconfiguration here
		403: Permanent,
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		err  *StatusError
		want Verdict
	}{
		{&StatusError{Code: 404}, Verdict{Class: Transient, Reason: "http_404"}},
		{&StatusError{Code: 503, RetryAfter: time.Second}, Verdict{Class: Transient, Reason: "http_503"}},
		{&StatusError{Code: 409, RetryAfter: time.Second}, Verdict{Class: RateLimited, RetryAfter: time.Second, Reason: "http_409"}},
		{&StatusError{Code: 302}, Verdict{Class: Permanent, Reason: "http_302"}},
		{&StatusError{Code: 403}, Verdict{Class: Permanent, Reason: "http_403"}},
		// Not overridden: defaults apply.
		{&StatusError{Code: 401}, Verdict{Class: NeedsAuth, Reason: "http_401"}},
		{&StatusError{Code: 429, RetryAfter: time.Second}, Verdict{Class: RateLimited, RetryAfter: time.Second, Reason: "http_429"}},
	}
	for _, tt := range tests {
		if got := c.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%d) = %+v, want %+v", tt.err.Code, got, tt.want)
		}
	}
}

func TestHTTPReasonTable(t *testing.T) {
	for _, code := range []int{100, 404, 599} {
		if got, want := httpReason(code), fmt.Sprintf("http_%d", code); got != want {
			t.Errorf("httpReason(%d) = %q", code, got)
		}
	}
	if got := httpReason(600); got != "http_600" {
		t.Errorf("httpReason(600) = %q", got)
	}
}
