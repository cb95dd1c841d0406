package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/internal/tracectx"
)

// FuzzTraceOf: whatever a record's trace headers hold, traceOf never
// fails or panics, and agrees with tracectx.Extract: "" for no valid
// traceparent, else the same span context; InjectTrace of that context
// then writes headers that read back the same.
func FuzzTraceOf(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", "00-zz")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", "")
	f.Add("garbage", "x=y", "")
	f.Add("", "", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", longState(), "") // cut
	f.Fuzz(func(t *testing.T, parent, state, earlier string) {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: tracectx.Parent, Value: []byte(earlier)},
			{Key: "x-app", Value: []byte("kept")}, {Key: tracectx.Parent, Value: []byte(parent)},
			{Key: tracectx.State, Value: []byte(state)}}}
		got := traceOf(r)
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
		out := &kgo.Record{Headers: append([]kgo.RecordHeader(nil), r.Headers...)}
		InjectTrace(trace.ContextWithRemoteSpanContext(context.Background(), sc), out)
		if back, _ := tracectx.Decode(traceOf(out)); !back.Equal(sc) {
			t.Fatalf("injected %v, read back %v", sc, back)
		}
		if v, _ := header(out, "x-app"); v != "kept" {
			t.Fatalf("InjectTrace dropped another header: %v", out.Headers)
		}
	})
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
