package sqlite

import (
	"bytes"
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

// Scan implements sql.Scanner.
func (t *storedTrace) Scan(src any) error {
	s, err := scanTrace(src, nil)
	*t = storedTrace(s)
	return err
}

// traceScan scans jobs.trace as storedTrace does, row after row: a row
// whose packed form is the previous row's shares its text, so that the
// jobs of one batch, which keep their enqueue's context, cost one text.
type traceScan struct {
	text string
	last traceCache
}

// Scan implements sql.Scanner.
func (t *traceScan) Scan(src any) (err error) {
	t.text, err = scanTrace(src, &t.last)
	return err
}

// traceCache is the last packed form unpacked, and its text.
type traceCache struct {
	packed []byte
	text   string
}

// scanTrace returns the text of a trace column's value src, reusing c's
// (nil: none). A BLOB that is no packed form, which no store writes,
// reads as no trace context and is counted in tracectx.Malformed, as a
// malformed traceparent is: the job is not refused for it, and the row
// keeps it.
func scanTrace(src any, c *traceCache) (string, error) {
	switch v := src.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		if c != nil && c.text != "" && bytes.Equal(v, c.packed) {
			return c.text, nil
		}
		s, ok := tracectx.Unpack(v)
		if !ok {
			tracectx.Malformed.Add(1)
			return "", nil
		}
		if c != nil {
			c.packed, c.text = append(c.packed[:0], v...), s
		}
		return s, nil
	}
	return "", fmt.Errorf("trace: unexpected column value of type %T", src)
}
