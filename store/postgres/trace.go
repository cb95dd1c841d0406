package postgres

import "github.com/redrivehq/redrive/internal/tracectx"

// A job's trace context (store.Job.Trace) is kept in one of two columns
// (migration 0037): trace_packed, its packed form (tracectx.AppendPacked:
// 25 bytes, then the tracestate when there is one), for every context
// that has one; trace, its text as given, for one that has none and in
// the rows written before 0037. At most one of the two is set.

// packTrace returns the packed form of the trace context tc, nil when it
// has none (or tc is "").
func packTrace(tc string) []byte {
	if tc == "" {
		return nil
	}
	p, ok := tracectx.AppendPacked(make([]byte, 0, tracectx.PackedLen+max(0, len(tc)-56)), tc)
	if !ok {
		return nil
	}
	return p
}

// readTrace returns the trace context of a row whose trace column is
// text and trace_packed column packed (nil: NULL). A packed form that
// does not unpack, which no store writes, reads as no trace context and
// is counted in tracectx.Malformed, as a malformed traceparent is: the
// job is not refused for it, and the row keeps it.
func readTrace(text string, packed []byte) string {
	if packed == nil {
		return text
	}
	s, ok := tracectx.Unpack(packed)
	if !ok {
		tracectx.Malformed.Add(1)
	}
	return s
}
