package sqlite

import (
	"fmt"

	"github.com/redrivehq/redrive/internal/tracectx"
)

// A job's trace context (store.Job.Trace) is kept in jobs.trace in one of
// two forms, told apart by the value's storage class (migration 0037):
// a BLOB is its packed form (tracectx.AppendPacked: 25 bytes, then the
// tracestate when there is one), what a store writes for every trace
// context that has one; TEXT is the context as it was given, what rows
// written before 0037 hold and what a store writes for a context that
// has no packed form. Both read back as the same text.

// traceArg returns the value the trace context tc is stored as: NULL for
// none, its packed form when it has one, else its text.
func traceArg(tc string) any {
	if tc == "" {
		return nil
	}
	if p, ok := tracectx.AppendPacked(make([]byte, 0, tracectx.PackedLen+max(0, len(tc)-56)), tc); ok {
		return p
	}
	return tc
}

// storedTrace scans jobs.trace (either form) into the trace context's
// text. It is an sql.Scanner, so that database/sql hands it the driver's
// value without copying a BLOB first.
type storedTrace string

// Scan implements sql.Scanner. A BLOB that is no packed form, which no
// store writes, reads as no trace context and is counted in
// tracectx.Malformed, as a malformed traceparent is: the job is not
// refused for it, and the row keeps it.
func (t *storedTrace) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = ""
	case string:
		*t = storedTrace(v)
	case []byte:
		s, ok := tracectx.Unpack(v)
		if !ok {
			tracectx.Malformed.Add(1)
		}
		*t = storedTrace(s)
	default:
		return fmt.Errorf("trace: unexpected column value of type %T", src)
	}
	return nil
}
