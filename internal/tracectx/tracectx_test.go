package tracectx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{valid, valid + " congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"} {
		sc, ok := Decode(s)
		if !ok || !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
			t.Fatalf("Decode(%q) = %v, %v; want a valid sampled remote span context", s, sc, ok)
		}
		if got := Encode(sc); got != s {
			t.Errorf("Encode(Decode(%q)) = %q", s, got)
		}
	}
	if sc, ok := Decode(""); !ok || sc.IsValid() {
		t.Errorf(`Decode("") = %v, %v; want none, ok`, sc, ok)
	}
	if got := Encode(trace.SpanContext{}); got != "" {
		t.Errorf("Encode of no span context = %q, want \"\"", got)
	}
}

// TestMalformed: what does not parse is no span context, counted; a bad
// tracestate alone is dropped.
func TestMalformed(t *testing.T) {
	for _, s := range []string{"x", "00-00000000000000000000000000000000-b7ad6b7169203331-01", "ff-" + valid[3:], valid[:20], valid + "0"} {
		before := Malformed.Load()
		if sc, ok := Decode(s); ok || sc.IsValid() {
			t.Errorf("Decode(%q) = %v, %v; want nothing, not ok", s, sc, ok)
		}
		if Malformed.Load() != before+1 {
			t.Errorf("Decode(%q) was not counted", s)
		}
	}
	sc, ok := Decode(valid + " ===")
	if !ok || !sc.IsValid() || sc.TraceState().Len() != 0 {
		t.Errorf("Decode with a bad tracestate = %v, %v; want the parent without a state", sc, ok)
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes to a trace
// context that decodes to the same span context.
func FuzzDecode(f *testing.F) {
	long := valid + " " + strings.Repeat("a=b,", 31) + "z=" + strings.Repeat("c", 250)
	for _, s := range []string{"", valid, valid + " a=b", "00-", "x y", valid + " ,,,a=b,,", long} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, ok := Decode(s)
		if !ok || !sc.IsValid() {
			return
		}
		enc := Encode(sc)
		again, ok := Decode(enc)
		if len(sc.TraceState().String()) <= maxState && (!ok || !again.Equal(sc)) {
			t.Fatalf("Decode(%q) = %v; Encode = %q decodes to %v, %v", s, sc, enc, again, ok)
		}
		// A long tracestate is cut, once: the ids and flags are kept.
		if !ok || again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() || again.TraceFlags() != sc.TraceFlags() || Encode(again) != enc {
			t.Fatalf("Decode(%q) = %v; Encode = %q decodes to %v, %v", s, sc, enc, again, ok)
		}
		if parent, state := Split(enc); len(state) > maxState || strings.HasSuffix(enc, " ") || len(parent) != 55 {
			t.Fatalf("Encode(Decode(%q)) = %q: over the bounds", s, enc)
		}
	})
}

// TestIDs: the ids of an encoded trace context, none for what is not a
// valid one, and nothing counted.
func TestIDs(t *testing.T) {
	before := Malformed.Load()
	for s, want := range map[string][2]string{
		valid:                     {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		valid + " congo=t61rcWkg": {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		valid[:53] + "02":         {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		valid[:53] + "03":         {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		valid[:53] + "04":         {},
		"":                        {},
		valid + "x":               {},
		valid[:54]:                {},
		"ff" + valid[2:]:          {},
		"00-00000000000000000000000000000000-b7ad6b7169203331-01": {},
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01": {},
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01": {},
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g": {},
	} {
		if tid, sid := IDs(s); tid != want[0] || sid != want[1] {
			t.Errorf("IDs(%q) = %q, %q; want %q, %q", s, tid, sid, want[0], want[1])
		}
	}
	if Malformed.Load() != before {
		t.Error("IDs counted malformed trace contexts")
	}
}

// FuzzIDs: IDs never panics, and what it accepts Decode accepts with the
// same ids.
func FuzzIDs(f *testing.F) {
	for _, s := range []string{"", valid, valid + " a=b", "00-", valid + "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tid, sid := IDs(s)
		if tid == "" {
			return
		}
		sc, ok := Decode(s)
		if !ok || sc.TraceID().String() != tid || sc.SpanID().String() != sid {
			t.Fatalf("IDs(%q) = %s, %s; Decode = %v, %v", s, tid, sid, sc, ok)
		}
	})
}

// FuzzIDsOfEncoded: the ids of every trace context Encode makes (the
// form a job keeps) are read by IDs, whatever its flags: a log line about
// any traced job carries them.
func FuzzIDsOfEncoded(f *testing.F) {
	f.Add(valid, byte(1))
	f.Add(valid+" a=b", byte(3))
	f.Fuzz(func(t *testing.T, s string, flags byte) {
		sc, ok := Decode(s)
		if !ok || !sc.IsValid() {
			return
		}
		sc = sc.WithTraceFlags(trace.TraceFlags(flags) & (trace.FlagsSampled | trace.FlagsRandom))
		enc := Encode(sc)
		if tid, sid := IDs(enc); tid != sc.TraceID().String() || sid != sc.SpanID().String() {
			t.Fatalf("IDs(%q) = %q, %q; want %s, %s", enc, tid, sid, sc.TraceID(), sc.SpanID())
		}
	})
}

// TestEncodeLongState: a valid tracestate longer than the 512 characters
// the W3C asks a tracer to propagate is cut as it says (members over 128
// characters first, then from the end), so that a job's trace context
// always fits store.MaxTrace; one within 512 is kept whole.
func TestEncodeLongState(t *testing.T) {
	sc, _ := Decode(valid)
	var ts trace.TraceState
	var err error
	for i := 31; i >= 0; i-- {
		v := strings.Repeat(string(rune('a'+i%26)), 64)
		if i == 1 {
			v = strings.Repeat("z", 200) // over 128: dropped first
		}
		if ts, err = ts.Insert(fmt.Sprintf("k%02d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	enc := Encode(sc.WithTraceState(ts))
	parent, state := Split(enc)
	if parent != valid || len(state) > maxState {
		t.Fatalf("Encode with a %d-character tracestate = %q (%d characters)", len(ts.String()), enc, len(state))
	}
	got, ok := Decode(enc)
	if !ok || got.TraceState().Len() != 7 || got.TraceState().Get("k00") == "" || got.TraceState().Get("k01") != "" || got.TraceState().Get("k02") == "" || got.TraceState().Get("k07") == "" {
		t.Errorf("cut tracestate %q: want k00, k02 to k07 (the long k01 dropped first, then from the end)", state)
	}
	short, _ := trace.ParseTraceState("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	if got := Encode(sc.WithTraceState(short)); got != valid+" congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" {
		t.Errorf("Encode with a short tracestate = %q", got)
	}
	h := map[string]string{Parent: valid, State: ts.String()}
	if got := FromHeaders(propagation.MapCarrier(h), true); len(got) > len(valid)+1+maxState {
		t.Errorf("FromHeaders with a %d-character tracestate = %d characters", len(h[State]), len(got))
	}
}

// FuzzExtractAsPropagator: Extract, with its fast path, agrees with the
// W3C propagator on every traceparent and tracestate, and Encode and
// Inject write what the propagator writes (Encode with the tracestate
// cut).
func FuzzExtractAsPropagator(f *testing.F) {
	for _, s := range [][2]string{{valid, ""}, {valid, "a=b"}, {"01-" + valid[3:], ""}, {"00-" + valid[3:54] + "3", ""},
		{"00-" + valid[3:54] + "4", ""}, {"cc-" + valid[3:] + "-extra", "x=y"}, {strings.ToUpper(valid), ""}, {valid, "==="}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, parent, state string) {
		got, ok := Extract(parent, state)
		c := Carrier{Parent: parent, State: state}
		want := trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
		if !got.Equal(want) || ok != (parent == "" || want.IsValid()) {
			t.Fatalf("Extract(%q, %q) = %v, %v; the propagator: %v", parent, state, got, ok, want)
		}
		if !want.IsValid() {
			return
		}
		var out Carrier
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), want), &out)
		enc := out.Parent
		if cs := cutState(out.State); cs != "" {
			enc += " " + cs // as TestEncodeLongState says
		}
		if e := Encode(got); e != enc {
			t.Fatalf("Encode(%v) = %q; the propagator wrote %q", got, e, enc)
		}
		var inj Carrier
		Inject(got, inj.Set)
		if inj != out {
			t.Fatalf("Inject(%v) = %+v; the propagator wrote %+v", got, inj, out)
		}
	})
}

// TestCodecAllocations: decoding a usual trace context allocates nothing,
// encoding one allocates its string only.
func TestCodecAllocations(t *testing.T) {
	sc, _ := Decode(valid)
	if n := testing.AllocsPerRun(100, func() { Decode(valid) }); n != 0 {
		t.Errorf("Decode allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { Encode(sc) }); n != 1 {
		t.Errorf("Encode allocates %v times, want 1", n)
	}
}

// BenchmarkDecode decodes the trace context of a job as its attempt does
// (a version 00 traceparent, no tracestate).
func BenchmarkDecode(b *testing.B) {
	const tc = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	b.ReportAllocs()
	for b.Loop() {
		if sc, ok := Decode(tc); !ok || !sc.IsValid() {
			b.Fatal("not decoded")
		}
	}
}

// TestLogAttr: the attribute of a log line about a job inlines its trace
// context's trace_id and span_id, and is empty (dropped by handlers) for
// none or one IDs refuses.
func TestLogAttr(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
			return slog.Attr{}
		}
		return a
	}}))
	for _, tc := range []string{"", "00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 congo=t61rcWkgMzE"} {
		log.Info("m", "job_id", 1, LogAttr(tc))
	}
	want := "msg=m job_id=1\nmsg=m job_id=1\nmsg=m job_id=1 trace_id=0af7651916cd43dd8448eb211c80319c span_id=b7ad6b7169203331\n"
	if buf.String() != want {
		t.Errorf("log lines:\n%s\nwant:\n%s", buf.String(), want)
	}
}
