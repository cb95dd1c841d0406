package amqp

import (
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/failure"
)

// TestFailureOf reads reports and rejections as a consumer in any
// language sends them.
func TestFailureOf(t *testing.T) {
	for _, c := range []struct {
		name     string
		h        amqp091.Table
		class    failure.Class
		after    time.Duration
		reason   string
		reported bool
		bad      bool
	}{
		{"plain reject", amqp091.Table{}, failure.Transient, 0, "rejected", false, false},
		{"x-death reject", amqp091.Table{"x-death": []any{amqp091.Table{"queue": "q", "reason": "rejected", "count": int64(2)}}},
			failure.Transient, 0, "rejected", false, false},
		{"delivery limit", amqp091.Table{"x-death": []any{amqp091.Table{"queue": "q", "reason": "delivery_limit", "count": int64(1)}}},
			failure.Transient, 0, "delivery_limit", false, false},
		{"permanent", amqp091.Table{HeaderClass: "permanent", HeaderError: "bad"}, failure.Permanent, 0, "", true, false},
		{"bytes class", amqp091.Table{HeaderClass: []byte("needs_auth")}, failure.NeedsAuth, 0, "", true, false},
		{"retry-after text", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: " 2.5 "}, failure.RateLimited, 2500 * time.Millisecond, "", true, false},
		{"retry-after int32", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: int32(3)}, failure.RateLimited, 3 * time.Second, "", true, false},
		{"retry-after float", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: 0.25}, failure.RateLimited, 250 * time.Millisecond, "", true, false},
		{"cause", amqp091.Table{HeaderClass: "transient", HeaderCause: "http_503"}, failure.Transient, 0, "http_503", true, false},
		{"unknown class", amqp091.Table{HeaderClass: "fatal"}, 0, 0, "", false, true},
		{"class number", amqp091.Table{HeaderClass: int64(3)}, 0, 0, "", false, true},
		{"negative retry-after", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: "-1"}, 0, 0, "", false, true},
		{"NaN retry-after", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: "NaN"}, 0, 0, "", false, true},
		{"retry-after words", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: "soon"}, 0, 0, "", false, true},
		{"retry-after table", amqp091.Table{HeaderClass: "rate_limited", HeaderRetryAfter: amqp091.Table{}}, 0, 0, "", false, true},
	} {
		v, msg, reported, err := failureOf(c.h, "q")
		if c.bad {
			if !errors.Is(err, errUndecodable) {
				t.Errorf("%s: error %v, want undecodable", c.name, err)
			}
			continue
		}
		if err != nil || v.Class != c.class || v.RetryAfter != c.after || v.Reason != c.reason || reported != c.reported || msg == "" {
			t.Errorf("%s: %+v %q reported %v err %v, want class %v after %v reason %q reported %v", c.name, v, msg, reported, err,
				c.class, c.after, c.reason, c.reported)
		}
	}
}

// FuzzFailureOf: any report headers are read or refused as undecodable;
// none panics, and what is read is in bounds.
func FuzzFailureOf(f *testing.F) {
	f.Add("rate_limited", "429", "1.5", "http_429")
	f.Add("permanent", "", "", "")
	f.Add("", "x", "1e9", "")
	f.Add("transient", "\xff", "-0", "c")
	f.Fuzz(func(t *testing.T, class, msg, after, cause string) {
		h := amqp091.Table{}
		if class != "" {
			h[HeaderClass] = class
		}
		if msg != "" {
			h[HeaderError] = msg
		}
		if after != "" {
			h[HeaderRetryAfter] = after
		}
		if cause != "" {
			h[HeaderCause] = cause
		}
		v, text, _, err := failureOf(h, "q")
		if err != nil {
			if !errors.Is(err, errUndecodable) {
				t.Fatalf("error %v does not wrap errUndecodable", err)
			}
			return
		}
		if v.Class == failure.None || v.RetryAfter < 0 || v.RetryAfter > 24*time.Hour || text == "" {
			t.Fatalf("read %+v %q from %v", v, text, h)
		}
	})
}
