package failure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"
)

func BenchmarkClassify(b *testing.B) {
	refused := &url.Error{Op: "Get", URL: "http://api.example/v1", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	seeded, err := NewClassifier(Config{Rules: CommonMessageRules()})
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		c    *Classifier
		err  error
	}{
		{"explicit", nil, fmt.Errorf("job 7: %w", Wrap(Permanent, errors.New("bad input")))},
		{"rate_limited", nil, WrapRateLimited(&StatusError{Code: 429}, 0)},
		{"status_503", nil, fmt.Errorf("call: %w", &StatusError{Code: 503, RetryAfter: time.Second})},
		{"url_refused", nil, refused},
		{"joined_deadline", nil, errors.Join(errors.New("cleanup"), fmt.Errorf("x: %w", context.DeadlineExceeded))},
		{"unknown", nil, errors.New("something odd")},
		{"seed_rules_match", seeded, errors.New("Authentication failed: key revoked")},
		{"seed_rules_miss", seeded, errors.New("something odd happened to the thing")},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.c.Classify(tc.err)
			}
		})
	}
}
