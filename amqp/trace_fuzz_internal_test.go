package amqp

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/internal/tracectx"
)

// FuzzTraceOf: whatever a message's trace headers hold, traceOf never
// fails or panics; what it returns is "" or a valid trace context whose
// traceparent is the header's (W3C normalizes none of it), and it agrees
// with tracectx.Extract.
func FuzzTraceOf(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE", false)
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", true)
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false)
	f.Add("garbage", "x=y", false)
	f.Add("", "", false)
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b,c", true)
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", longState(), false) // cut
	f.Fuzz(func(t *testing.T, parent, state string, asBytes bool) {
		h := amqp091.Table{}
		if asBytes {
			h[tracectx.Parent], h[tracectx.State] = []byte(parent), []byte(state)
		} else {
			h[tracectx.Parent], h[tracectx.State] = parent, state
		}
		got := traceOf(h)
		want, ok := tracectx.Extract(parent, state)
		if !ok || !want.IsValid() {
			if got != "" {
				t.Fatalf("traceOf(%q, %q) = %q, want none", parent, state, got)
			}
			return
		}
		// The same span context, its tracestate cut as a job keeps it.
		sc, ok := tracectx.Decode(got)
		if !ok || got != tracectx.Encode(want) || sc.TraceID() != want.TraceID() || sc.SpanID() != want.SpanID() {
			t.Fatalf("traceOf(%q, %q) = %q, decodes to %v, want %v", parent, state, got, sc, want)
		}
	})
}

// TestTraceOfNotText: a traceparent that is not text (a client sent a
// number) is malformed, not an error.
func TestTraceOfNotText(t *testing.T) {
	before := tracectx.Malformed.Load()
	if got := traceOf(amqp091.Table{tracectx.Parent: int64(7)}); got != "" {
		t.Fatalf("traceOf = %q, want none", got)
	}
	if tracectx.Malformed.Load() != before+1 {
		t.Fatalf("not counted as malformed")
	}
	if got := traceOf(amqp091.Table{}); got != "" {
		t.Fatalf("traceOf(no headers) = %q", got)
	}
}

// longState is a valid tracestate of 31 members, 898 characters: a job
// keeps it cut.
func longState() string {
	members := make([]string, 31)
	for i := range members {
		members[i] = fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 25))
	}
	return strings.Join(members, ",")
}
