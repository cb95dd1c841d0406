// Package tracectx encodes a span context as the W3C trace context a job
// keeps (store.Job.Trace) and carries on a broker message: the
// traceparent header's value, then, when there is a tracestate, a space
// and its value. Anything that does not parse is no trace context: the
// caller starts a new trace and counts it (Malformed), and the job is
// never refused for it.
package tracectx

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"unsafe"

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
// is not valid. It writes what the W3C propagator would (flags other
// than sampled and random cleared), the tracestate cut to maxState, in
// one allocation.
func Encode(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	state := cutState(sc.TraceState().String())
	var b strings.Builder
	if state == "" {
		b.Grow(parentLen)
	} else {
		b.Grow(parentLen + 1 + len(state))
	}
	var buf [parentLen]byte
	b.Write(appendParent(buf[:0], sc))
	if state != "" {
		b.WriteByte(' ')
		b.WriteString(state)
	}
	return b.String()
}

// parentLen is the length of a version 00 traceparent.
const parentLen = 55

// appendParent appends the version 00 traceparent of the valid sc to b.
func appendParent(b []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	return hex.AppendEncode(b, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
}

// maxState bounds the tracestate a job keeps, in characters: the 512 the
// W3C asks every tracer to propagate. With the 55 of a traceparent it
// fits store.MaxTrace.
const maxState = 512

// maxStateMember is the length over which a member is dropped first
// when a tracestate is cut (the W3C's 128).
const maxStateMember = 128

// cutState returns the tracestate state (valid, as the propagator writes
// it) cut to maxState characters as the W3C says: members longer than
// maxStateMember dropped first, then members from the end (the oldest).
func cutState(state string) string {
	if len(state) <= maxState {
		return state
	}
	members := strings.Split(state, ",")
	kept := members[:0]
	for _, m := range members {
		if len(m) <= maxStateMember {
			kept = append(kept, m)
		}
	}
	n := -1 // the length of kept's members joined
	for i, m := range kept {
		if n+1+len(m) > maxState {
			kept = kept[:i]
			break
		}
		n += 1 + len(m)
	}
	return strings.Join(kept, ",")
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
	scc, ok := parseParent(parent)
	if ok {
		if state != "" {
			scc.TraceState, _ = trace.ParseTraceState(state)
		}
		sc = trace.NewSpanContext(scc)
	} else {
		// Not the usual form: the propagator decides (other versions, and
		// what neither accepts).
		c := Carrier{Parent: parent, State: state}
		sc = trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
	}
	if !sc.IsValid() {
		Malformed.Add(1)
		return trace.SpanContext{}, false
	}
	return sc, true
}

// parseParent parses a version 00 traceparent in its only valid form
// (lowercase hex, the flags' reserved bits clear), in one pass and
// without allocating; false for anything else, which Extract leaves to
// the propagator. What it accepts the propagator accepts alike
// (FuzzExtractAsPropagator).
func parseParent(p string) (scc trace.SpanContextConfig, ok bool) {
	if len(p) != parentLen || p[:3] != "00-" || p[35] != '-' || p[52] != '-' {
		return scc, false
	}
	var flags [1]byte
	if !unhexLower(scc.TraceID[:], p[3:35]) || !unhexLower(scc.SpanID[:], p[36:52]) || !unhexLower(flags[:], p[53:55]) || flags[0] > 3 {
		return scc, false
	}
	scc.TraceFlags = trace.TraceFlags(flags[0])
	scc.Remote = true
	return scc, true
}

// hexValue maps a lowercase hex digit to its value and every other byte
// to 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
	}
	return t
}()

// unhexLower decodes s, 2*len(dst) lowercase hex digits, into dst; false
// when s has any other byte.
func unhexLower(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, lo := hexValue[s[2*i]], hexValue[s[2*i+1]]
		if (hi|lo)&0xf0 != 0 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// IDs returns the trace id and the span id of an encoded trace context
// s, as lowercase hex, for a log line; "" and "" when s is none or not a
// version 00 traceparent with non-zero ids. It does not count what it
// refuses in Malformed (a log line is not a new finding) and allocates
// nothing.
func IDs(s string) (traceID, spanID string) {
	// 00-<32 hex>-<16 hex>-<2 hex>, then nothing or a space.
	if len(s) < 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' || (len(s) > 55 && s[55] != ' ') {
		return "", ""
	}
	traceID, spanID = s[3:35], s[36:52]
	// Version 00 flags beyond the sampled (01) and random (02) bits are
	// refused, as the propagator refuses them: 00 to 03.
	flags := s[53:55]
	if !lowerHex(traceID) || !lowerHex(spanID) || flags[0] != '0' || flags[1] > '3' || flags[1] < '0' || allZero(traceID) || allZero(spanID) {
		return "", ""
	}
	return traceID, spanID
}

// LogAttr returns the trace_id and span_id of the encoded trace context
// s (IDs) as one attribute of a log line, which handlers inline; the
// empty attribute, which they drop, when s has none.
func LogAttr(s string) slog.Attr {
	traceID, spanID := IDs(s)
	if traceID == "" {
		return slog.Attr{}
	}
	return slog.Attr{Value: slog.GroupValue(slog.String("trace_id", traceID), slog.String("span_id", spanID))}
}

// lowerHex reports whether s is lowercase hex digits only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// allZero reports whether s is zeros only.
func allZero(s string) bool {
	return strings.Trim(s, "0") == ""
}

// Inject sets the W3C headers of sc through set, and nothing when sc is
// not valid.
func Inject(sc trace.SpanContext, set func(key, value string)) {
	if !sc.IsValid() {
		return
	}
	var buf [parentLen]byte
	set(Parent, string(appendParent(buf[:0], sc)))
	if state := sc.TraceState().String(); state != "" {
		set(State, state)
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

// FromHeaders returns the trace context a message's headers c carry,
// encoded as a job keeps it: "" when there is no traceparent header
// (present false: a carrier's Get cannot tell a missing header from one
// that is not text), and "" when the traceparent is malformed, which is
// counted in Malformed. A tracestate that does not parse is dropped.
func FromHeaders(c propagation.TextMapCarrier, present bool) string {
	if !present {
		return ""
	}
	parent := c.Get(Parent)
	if parent == "" {
		Malformed.Add(1)
		return ""
	}
	sc, ok := Extract(parent, c.Get(State))
	if !ok {
		return ""
	}
	return Encode(sc)
}

// PackedLen is the length of a traceparent in its packed form (Pack): the
// trace id's 16 bytes, the span id's 8 and the flags' 1.
const PackedLen = 25

// Packable reports whether the encoded trace context s has a packed form
// (Pack): a version 00 traceparent in lowercase hex, what Encode writes,
// then nothing or a space and a tracestate that is not empty, of
// printable ASCII (as store.CheckTrace asks).
func Packable(s string) bool {
	if len(s) < parentLen || s[:3] != "00-" || s[35] != '-' || s[52] != '-' || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return false
	}
	if len(s) == parentLen {
		return true
	}
	return len(s) > parentLen+1 && s[parentLen] == ' ' && printable(s[parentLen+1:])
}

// printable reports whether s is printable ASCII only.
func printable[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// AppendPacked appends the packed form of the encoded trace context s to
// b: the traceparent's trace id, span id and flags as their 25 bytes, then
// the tracestate's characters as they are (none when s has none). It
// returns b as it is and false when s is not Packable. The packed form
// keeps s exactly: Unpack returns it.
func AppendPacked(b []byte, s string) ([]byte, bool) {
	if !Packable(s) {
		return b, false
	}
	n := len(b)
	b = append(b, make([]byte, PackedLen)...)
	// Packable checked the digits: these cannot fail.
	unhexLower(b[n:n+16], s[3:35])
	unhexLower(b[n+16:n+24], s[36:52])
	unhexLower(b[n+24:n+25], s[53:55])
	if len(s) > parentLen {
		b = append(b, s[parentLen+1:]...)
	}
	return b, true
}

// Unpack returns the encoded trace context whose packed form is p
// (AppendPacked), in one allocation; false when p cannot be one: shorter
// than PackedLen, or with a tracestate that is not printable ASCII.
func Unpack(p []byte) (string, bool) {
	if len(p) < PackedLen {
		return "", false
	}
	state := p[PackedLen:]
	if !printable(state) {
		return "", false
	}
	n := parentLen
	if len(state) > 0 {
		n += 1 + len(state)
	}
	b := make([]byte, 0, n)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, p[:16])
	b = append(b, '-')
	b = hex.AppendEncode(b, p[16:24])
	b = append(b, '-')
	b = hex.AppendEncode(b, p[24:25])
	if len(state) > 0 {
		b = append(b, ' ')
		b = append(b, state...)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}
