package tracectx

import (
	"bytes"
	"strings"
	"testing"
)

// TestPacked: what Encode writes packs to 25 bytes and its tracestate,
// and unpacks to itself; what is not in that form does not pack.
func TestPacked(t *testing.T) {
	for _, s := range []string{valid, valid + " congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"00-00000000000000000000000000000000-0000000000000000-ff", valid + "  ", valid + " a b"} {
		p, ok := AppendPacked([]byte("x"), s)
		if !ok {
			t.Fatalf("AppendPacked(%q) not ok", s)
		}
		if p[0] != 'x' || len(p) != 1+PackedLen+max(0, len(s)-parentLen-1) {
			t.Errorf("AppendPacked(%q) = %x: want x then %d bytes", s, p, len(s)-parentLen+PackedLen)
		}
		if got, ok := Unpack(p[1:]); !ok || got != s {
			t.Errorf("Unpack(AppendPacked(%q)) = %q, %v", s, got, ok)
		}
	}
	p, _ := AppendPacked(nil, valid)
	if want := []byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
		0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31, 0x01}; !bytes.Equal(p, want) {
		t.Errorf("AppendPacked(%q) = %x, want %x", valid, p, want)
	}
	for _, s := range []string{"", "x", valid[:54], valid + " ", valid + "0", strings.ToUpper(valid), "01-" + valid[3:],
		valid[:35] + "+" + valid[36:], valid[:3] + "0af7651916cd43dd8448eb211c80319g" + valid[35:], valid + "\tx"} {
		if Packable(s) {
			t.Errorf("Packable(%q) = true", s)
		}
		if p, ok := AppendPacked([]byte("x"), s); ok || string(p) != "x" {
			t.Errorf("AppendPacked(%q) = %q, %v; want x unchanged, false", s, p, ok)
		}
	}
	for _, p := range [][]byte{nil, make([]byte, PackedLen-1), append(make([]byte, PackedLen), '\n'), append(make([]byte, PackedLen), 0x7f)} {
		if s, ok := Unpack(p); ok || s != "" {
			t.Errorf("Unpack(%x) = %q, %v; want nothing, false", p, s, ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Unpack(p) }); n != 1 {
		t.Errorf("Unpack allocates %v times, want 1", n)
	}
}

// FuzzPacked: a string packs exactly when it is Packable, and what packs
// unpacks to itself; any bytes unpack to a Packable string or to nothing.
func FuzzPacked(f *testing.F) {
	f.Add(valid, []byte(nil))
	f.Add(valid+" rojo=00f067aa0ba902b7", make([]byte, PackedLen))
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0", []byte("0123456789012345678901234 x"))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		p, ok := AppendPacked(nil, s)
		if ok != Packable(s) {
			t.Fatalf("AppendPacked(%q) ok %v, Packable %v", s, ok, Packable(s))
		}
		if ok {
			if got, uok := Unpack(p); !uok || got != s {
				t.Fatalf("Unpack(AppendPacked(%q)) = %q, %v", s, got, uok)
			}
		}
		if u, ok := Unpack(raw); ok {
			if !Packable(u) {
				t.Fatalf("Unpack(%x) = %q, not Packable", raw, u)
			}
			if back, _ := AppendPacked(nil, u); !bytes.Equal(back, raw) {
				t.Fatalf("AppendPacked(Unpack(%x)) = %x", raw, back)
			}
		}
	})
}

// BenchmarkUnpack unpacks the stored trace context of a job as a fetch
// does (a version 00 traceparent, no tracestate).
func BenchmarkUnpack(b *testing.B) {
	p, _ := AppendPacked(nil, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Unpack(p); !ok {
			b.Fatal("not unpacked")
		}
	}
}
