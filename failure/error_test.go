package failure

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// custom is a cause with a type, to check errors.As through the wrappers.
type custom struct{ id int }

func (c *custom) Error() string { return fmt.Sprintf("custom %d", c.id) }

func TestWrappersKeepCause(t *testing.T) {
	cause := &custom{id: 7}
	wrapped := fmt.Errorf("load: %w", cause)
	tests := []struct {
		name  string
		err   error
		class Class
		after time.Duration
	}{
		{"permanent", Wrap(Permanent, wrapped), Permanent, 0},
		{"transient", Wrap(Transient, wrapped), Transient, 0},
		{"needs auth", Wrap(NeedsAuth, wrapped), NeedsAuth, 0},
		{"unknown", Wrap(Unknown, wrapped), Unknown, 0},
		{"rate limited", WrapRateLimited(wrapped, 90*time.Second), RateLimited, 90 * time.Second},
		{"rate limited, no delay", WrapRateLimited(wrapped, 0), RateLimited, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, cause) {
				t.Error("errors.Is does not reach the cause")
			}
			var c *custom
			if !errors.As(tt.err, &c) || c.id != 7 {
				t.Errorf("errors.As = %v, %v", c, c != nil)
			}
			if got, want := tt.err.Error(), "load: custom 7"; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
			var e *Error
			if !errors.As(tt.err, &e) || e.Class != tt.class {
				t.Fatalf("errors.As(*Error) class = %v, want %v", e, tt.class)
			}
			want := Verdict{Class: tt.class, Reason: ReasonExplicit, RetryAfter: tt.after}
			if got := Classify(tt.err); got != want {
				t.Errorf("Classify = %+v, want %+v", got, want)
			}
			if got := Classify(fmt.Errorf("job 1: %w", tt.err)); got != want {
				t.Errorf("Classify(wrapped) = %+v, want %+v", got, want)
			}
		})
	}
}

func TestWrapNilNeverSucceeds(t *testing.T) {
	for _, c := range Classes {
		err := Wrap(c, nil)
		if err == nil {
			t.Fatalf("Wrap(%v, nil) = nil", c)
		}
		if got := err.Error(); got != c.String() {
			t.Errorf("Wrap(%v, nil).Error() = %q, want %q", c, got, c.String())
		}
		if errors.Unwrap(err) != nil {
			t.Errorf("Wrap(%v, nil) unwraps to non-nil", c)
		}
		if got := Classify(err); got.Class != c || got.Reason != ReasonExplicit {
			t.Errorf("Classify(Wrap(%v, nil)) = %+v", c, got)
		}
	}
	err := WrapRateLimited(nil, time.Second)
	if err == nil || err.Error() != "rate_limited" {
		t.Errorf("WrapRateLimited(nil) = %v", err)
	}
	var nilErr *Error
	if nilErr.Error() != "<nil>" || nilErr.Unwrap() != nil {
		t.Error("nil *Error methods misbehave")
	}
}

func TestOutermostWrapperWins(t *testing.T) {
	inner := WrapRateLimited(errors.New("slow down"), time.Minute)
	tests := []struct {
		name string
		err  error
		want Verdict
	}{
		{"permanent over transient", Wrap(Permanent, Wrap(Transient, io.EOF)), Verdict{Class: Permanent, Reason: ReasonExplicit}},
		{"transient over permanent, through fmt", fmt.Errorf("a: %w", Wrap(Transient, fmt.Errorf("b: %w", Wrap(Permanent, io.EOF)))),
			Verdict{Class: Transient, Reason: ReasonExplicit}},
		{"needs auth over rate limited", Wrap(NeedsAuth, inner), Verdict{Class: NeedsAuth, Reason: ReasonExplicit}},
		{"rate limited keeps its own delay", WrapRateLimited(Wrap(Permanent, nil), 3*time.Second),
			Verdict{Class: RateLimited, RetryAfter: 3 * time.Second, Reason: ReasonExplicit}},
		{"inner rate limited delay", fmt.Errorf("x: %w", inner), Verdict{Class: RateLimited, RetryAfter: time.Minute, Reason: ReasonExplicit}},
		{"first branch of a join", errors.Join(errors.New("a"), Wrap(NeedsAuth, nil), Wrap(Permanent, nil)),
			Verdict{Class: NeedsAuth, Reason: ReasonExplicit}},
		{"depth-first, like errors.As", errors.Join(fmt.Errorf("a: %w", Wrap(Transient, nil)), Wrap(Permanent, nil)),
			Verdict{Class: Transient, Reason: ReasonExplicit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify = %+v, want %+v", got, tt.want)
			}
			var e *Error
			if !errors.As(tt.err, &e) || e.Class != tt.want.Class {
				t.Errorf("errors.As finds %+v; Classify must agree with it", e)
			}
		})
	}
}

func TestRateLimitedRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"given", WrapRateLimited(nil, 2*time.Second), 2 * time.Second},
		{"negative is zero", WrapRateLimited(nil, -time.Second), 0},
		{"clamped", WrapRateLimited(nil, 365*24*time.Hour), MaxRetryAfter},
		{"falls back to wrapped response", WrapRateLimited(fmt.Errorf("x: %w", &StatusError{Code: 429, RetryAfter: 7 * time.Second}), 0), 7 * time.Second},
		{"own delay beats response", WrapRateLimited(&StatusError{Code: 429, RetryAfter: 7 * time.Second}, time.Second), time.Second},
		{"other classes carry none", &Error{Class: Transient, RetryAfter: time.Hour}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err).RetryAfter; got != tt.want {
				t.Errorf("RetryAfter = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStatusErrorMessage(t *testing.T) {
	long := strings.Repeat("é", MaxBodyExcerpt) // 2 bytes each
	tests := []struct {
		name string
		err  *StatusError
		want string
	}{
		{"code only", &StatusError{Code: 404}, "http status 404 Not Found"},
		{"unknown code", &StatusError{Code: 599}, "http status 599"},
		{"status line", &StatusError{Code: 503, Status: "503 Service Unavailable"}, "http status 503 Service Unavailable"},
		{"retry after and body", &StatusError{Code: 429, RetryAfter: 2 * time.Second, Body: "  slow down\n"},
			"http status 429 Too Many Requests (retry after 2s): slow down"},
		{"nil", nil, "http status <nil>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
	exact := strings.Repeat("x", MaxBodyExcerpt)
	if got := (&StatusError{Code: 500, Body: exact}).Error(); !strings.HasSuffix(got, ": "+exact) {
		t.Errorf("a body of exactly MaxBodyExcerpt bytes was cut: %q", got[len(got)-10:])
	}
	msg := (&StatusError{Code: 500, Body: long}).Error()
	if !utf8.ValidString(msg) || !strings.HasSuffix(msg, "…") || len(msg) > len("http status 500 Internal Server Error: ")+MaxBodyExcerpt+len("…") {
		t.Errorf("long body not bounded to valid UTF-8: %d bytes, valid %v", len(msg), utf8.ValidString(msg))
	}
}

func TestFromResponse(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "120")
	rec.WriteHeader(http.StatusServiceUnavailable)
	rec.WriteString(strings.Repeat("x", 2*MaxBodyExcerpt))
	resp := rec.Result()
	err := FromResponse(resp)
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("FromResponse = %v, want *StatusError", err)
	}
	if se.Code != 503 || se.Status != "503 Service Unavailable" || se.RetryAfter != 120*time.Second {
		t.Errorf("StatusError = %+v", se)
	}
	if len(se.Body) != MaxBodyExcerpt+len("…") {
		t.Errorf("Body is %d bytes, want the first %d plus an ellipsis", len(se.Body), MaxBodyExcerpt)
	}
	if rest, _ := io.ReadAll(resp.Body); len(rest) != MaxBodyExcerpt-1 {
		t.Errorf("FromResponse consumed %d bytes, want %d", 2*MaxBodyExcerpt-len(rest), MaxBodyExcerpt+1)
	}
	if got := Classify(err); got != (Verdict{Class: RateLimited, RetryAfter: 120 * time.Second, Reason: "http_503"}) {
		t.Errorf("Classify = %+v", got)
	}

	for _, code := range []int{200, 204, 304} {
		rec := httptest.NewRecorder()
		rec.WriteHeader(code)
		if err := FromResponse(rec.Result()); err != nil {
			t.Errorf("FromResponse(%d) = %v, want nil", code, err)
		}
	}
	if err := FromResponse(nil); err == nil {
		t.Error("FromResponse(nil) = nil, want an error")
	}
	if err := FromResponse(&http.Response{StatusCode: 418}); err == nil || !strings.Contains(err.Error(), "418") {
		t.Errorf("FromResponse without body or status = %v", err)
	}
}

func TestFromResponseRealServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		http.Error(w, "quota exhausted", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	err = FromResponse(resp)
	want := Verdict{Class: RateLimited, RetryAfter: 3 * time.Second, Reason: "http_429"}
	if got := Classify(err); got != want {
		t.Errorf("Classify = %+v, want %+v", got, want)
	}
	if !strings.HasSuffix(err.Error(), ": quota exhausted") {
		t.Errorf("message %q lacks the body", err.Error())
	}
}

func TestErrorIsThroughStatusAndWrappers(t *testing.T) {
	err := Wrap(Transient, fmt.Errorf("open: %w", os.ErrNotExist))
	if !errors.Is(err, os.ErrNotExist) {
		t.Error("errors.Is lost the cause")
	}
}
