// Package tracectx encodes a span context as the W3C trace context a job
// keeps (store.Job.Trace) and carries on a broker message: the
// traceparent header's value, then, when there is a tracestate, a space
// and its value. Anything that does not parse is no trace context: the
// caller starts a new trace and counts it (Malformed), and the job is
// never refused for it.
package tracectx

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C header names.
const (
	Parent = "traceparent"
	State  = "tracestate"
)

// Carrier is a propagation.TextMapCarrier of the two W3C headers, kept
// without a map.
type Carrier struct{ Parent, State string }

// Get returns the value of the header key ("" when absent).
func (c *Carrier) Get(key string) string {
	switch key {
	case Parent:
		return c.Parent
	case State:
		return c.State
	}
	return ""
}

// Set sets the header key; headers other than the two are dropped.
func (c *Carrier) Set(key, value string) {
	switch key {
	case Parent:
		c.Parent = value
	case State:
		c.State = value
	}
}

// Keys lists the headers set.
func (c *Carrier) Keys() []string {
	switch {
	case c.Parent == "":
		return nil
	case c.State == "":
		return []string{Parent}
	}
	return []string{Parent, State}
}

var w3c propagation.TraceContext

// Encode returns the trace context of sc as a job keeps it, "" when sc
// is not valid.
func Encode(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var c Carrier
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	if c.State == "" {
		return c.Parent
	}
	return c.Parent + " " + c.State
}

// Split returns the traceparent and the tracestate of an encoded trace
// context.
func Split(s string) (parent, state string) {
	parent, state, _ = strings.Cut(s, " ")
	return parent, state
}

// Malformed counts the trace contexts Decode and Extract found malformed
// since the process started.
var Malformed atomic.Int64

// Decode returns the remote span context an encoded trace context names.
// "" is none (ok); anything else that does not parse is counted in
// Malformed and returns ok false.
func Decode(s string) (sc trace.SpanContext, ok bool) {
	if s == "" {
		return trace.SpanContext{}, true
	}
	parent, state := Split(s)
	return Extract(parent, state)
}

// Extract returns the remote span context of the W3C headers parent and
// state. No parent is none (ok); a parent that does not parse is counted
// in Malformed and returns ok false. A tracestate that does not parse is
// dropped (the W3C rule), keeping the parent.
func Extract(parent, state string) (sc trace.SpanContext, ok bool) {
	if parent == "" {
		return trace.SpanContext{}, true
	}
	c := Carrier{Parent: parent, State: state}
	sc = trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
	if !sc.IsValid() {
		Malformed.Add(1)
		return trace.SpanContext{}, false
	}
	return sc, true
}

// Inject sets the W3C headers of sc through set, and nothing when sc is
// not valid.
func Inject(sc trace.SpanContext, set func(key, value string)) {
	if !sc.IsValid() {
		return
	}
	var c Carrier
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	set(Parent, c.Parent)
	if c.State != "" {
		set(State, c.State)
	}
}

// SetHeader sets the traceparent (and tracestate) headers of h to the
// span context of ctx's span, so that a request h belongs to joins its
// trace. It does nothing when ctx has no valid span context or h already
// has a traceparent (a caller's own wins).
func SetHeader(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || h.Get(Parent) != "" {
		return
	}
	h.Del(State) // a tracestate belongs with its traceparent
	Inject(sc, h.Set)
}
