package failure_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redrivehq/redrive/failure"
)

func ExampleClassify() {
	errs := []error{
		&failure.StatusError{Code: 503, RetryAfter: 30 * time.Second},
		&failure.StatusError{Code: 404},
		&failure.StatusError{Code: 401},
		fmt.Errorf("fetch page 3: %w", context.DeadlineExceeded),
		failure.Wrap(failure.Permanent, errors.New("account closed")),
		errors.New("something odd"),
	}
	for _, err := range errs {
		v := failure.Classify(err)
		fmt.Printf("%-12s retry=%-5v after=%-3v %s\n", v.Class, v.Class.Retryable(), v.RetryAfter, v.Reason)
	}
	// Output:
	// rate_limited retry=true  after=30s http_503
	// permanent    retry=false after=0s  http_404
	// needs_auth   retry=false after=0s  http_401
	// transient    retry=true  after=0s  deadline_exceeded
	// permanent    retry=false after=0s  explicit
	// unknown      retry=true  after=0s  unknown
}

func ExampleWrap() {
	// A handler that knows an error is final says so; the cause stays
	// reachable with errors.Is and errors.As.
	errNoSuchAccount := errors.New("no such account")
	err := fmt.Errorf("charge customer 42: %w",
		failure.Wrap(failure.Permanent, errNoSuchAccount))

	v := failure.Classify(err)
	fmt.Println(v.Class, v.Reason, errors.Is(err, errNoSuchAccount))

	// Wrapping a nil error still yields an error: a failure cannot turn
	// into a success by accident.
	fmt.Println(failure.Wrap(failure.Permanent, nil))
	// Output:
	// permanent explicit true
	// permanent
}

func ExampleWrapRateLimited() {
	err := failure.WrapRateLimited(errors.New("quota exhausted"), 90*time.Second)
	v := failure.Classify(err)
	fmt.Println(v.Class, v.RetryAfter)
	// Output: rate_limited 1m30s
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)
	for _, h := range []string{
		"120",
		"1.5",
		"Sat, 14 Mar 2026 12:05:00 GMT",
		"Fri, 13 Mar 2026 12:00:00 GMT", // in the past
		"99999999999",                   // clamped
		"soon",
	} {
		d, ok := failure.ParseRetryAfter(h, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 1.5s true
	// 5m0s true
	// 0s true
	// 720h0m0s true
	// 0s false
}

func ExampleNewClassifier() {
	c, err := failure.NewClassifier(failure.Config{
		// This API answers 404 while a freshly created object replicates.
		Status: map[int]failure.Class{404: failure.Transient},
		Rules: append([]failure.Rule{
			{Class: failure.Permanent, Regexp: `^invoice [0-9]+ is void`},
		}, failure.CommonMessageRules()...),
	})
	if err != nil {
		panic(err)
	}
	for _, err := range []error{
		&failure.StatusError{Code: 404},
		errors.New("invoice 17 is void"),
		errors.New("Authentication failed: key revoked"),
		errors.New("upstream timeout"),
	} {
		v := c.Classify(err)
		fmt.Println(v.Class, v.Reason)
	}

	_, err = failure.NewClassifier(failure.Config{Rules: []failure.Rule{
		{Class: failure.Transient, Regexp: "retry(able"},
	}})
	fmt.Println(err)
	// Output:
	// transient http_404
	// permanent rule:^invoice [0-9]+ is void
	// needs_auth rule:authentication failed
	// transient rule:timeout
	// failure: rule 0 (regexp "retry(able"): invalid regexp: error parsing regexp: missing closing ): `retry(able`
}

func ExampleFromResponse() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	if err := failure.FromResponse(resp); err != nil {
		v := failure.Classify(err)
		fmt.Println(err)
		fmt.Println(v.Class, v.RetryAfter, v.Reason)
	}
	// Output:
	// http status 429 Too Many Requests (retry after 7s): slow down
	// rate_limited 7s http_429
}
