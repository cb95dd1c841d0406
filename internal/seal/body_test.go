package seal

import (
	"bytes"
	"errors"
	"testing"
)

// TestBodies: which queues seal, the mark deciding whether a body is
// opened, and the errors of bodies that do not open.
func TestBodies(t *testing.T) {
	k := mustParse(t, "k2:"+key(2)+"\nk1:"+key(1))
	b := &Bodies{Keys: k, Names: map[string]bool{"orders": true}}
	if !b.Seals("orders") || b.Seals("other") || (&Bodies{Keys: k, All: true}).Seals("any") == false ||
		(&Bodies{All: true}).Seals("any") || (*Bodies)(nil).Seals("orders") {
		t.Fatal("Seals")
	}
	plain := []byte(`{"card":"4111"}`)
	out, id, err := b.Seal("other", plain)
	if err != nil || id != "" || !bytes.Equal(out, plain) {
		t.Fatalf("a queue not sealed: %q %q %v", out, id, err)
	}
	out, id, err = b.Seal("orders", plain)
	if err != nil || id != "k2" || !IsSealed(out) || bytes.Contains(out, []byte("4111")) {
		t.Fatalf("sealed: %q %q %v", out, id, err)
	}
	if got, err := b.Open("orders", out, true); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q %v", got, err)
	}
	if got, err := b.Open("orders", out, false); err != nil || !bytes.Equal(got, out) {
		t.Fatalf("unmarked is taken as it is: %q %v", got, err)
	}
	for name, c := range map[string]struct {
		b     *Bodies
		queue string
		body  []byte
		want  error
	}{
		"no keys":           {nil, "orders", out, ErrUnknownKey},
		"unknown key":       {&Bodies{Keys: mustParse(t, "k9:"+key(9))}, "orders", out, ErrUnknownKey},
		"same id other key": {&Bodies{Keys: mustParse(t, "k2:"+key(7))}, "orders", out, ErrCorrupt},
		"other queue":       {b, "payments", out, ErrCorrupt},
		"not an envelope":   {b, "orders", plain, ErrCorrupt},
		"tampered":          {b, "orders", append(append([]byte{}, out[:len(out)-3]...), 'A', 'A', '"'), ErrCorrupt},
	} {
		if got, err := c.b.Open(c.queue, c.body, true); !errors.Is(err, c.want) || got != nil {
			t.Errorf("%s: %q %v, want %v", name, got, err, c.want)
		}
	}
	all, names, err := ParseNames("amqp-encrypt-bodies", " a, b ,", nil)
	if err != nil || all || len(names) != 2 || !names["a"] || !names["b"] {
		t.Fatalf("ParseNames: %v %v %v", all, names, err)
	}
	if all, _, err := ParseNames("x", "*", nil); err != nil || !all {
		t.Fatal("*")
	}
	if _, _, err := ParseNames("x", "a,*", nil); err == nil {
		t.Fatal(`"*" in a list accepted`)
	}
	if _, _, err := ParseNames("x", "a,b", func(n string) error {
		if n == "b" {
			return errors.New("bad name")
		}
		return nil
	}); err == nil {
		t.Fatal("the check was not applied")
	}
}

// FuzzOpenBody: whatever bytes arrive marked sealed, Open never panics,
// and succeeds only on a genuine envelope of the queue, giving back what
// was sealed.
func FuzzOpenBody(f *testing.F) {
	k := mustParse(f, "k2:"+key(2)+"\nk1:"+key(1))
	b := &Bodies{Keys: k, All: true}
	for _, p := range []string{"", "{}", `{"a":1}`, "\x00\xff"} {
		s, _, err := b.Seal("q", []byte(p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s, []byte(p))
		f.Add(s[:len(s)/2], []byte(p))
	}
	f.Add([]byte(`"rdenc:k1:"`), []byte(nil))
	f.Add([]byte(`"rdenc::AAAA"`), []byte(nil))
	f.Fuzz(func(t *testing.T, body, plain []byte) {
		got, err := b.Open("q", body, true)
		if err != nil {
			if got != nil {
				t.Fatalf("an error with a body %q", got)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnknownKey", err)
			}
			return
		}
		if !IsSealed(body) {
			t.Fatalf("%q opened but is not an envelope", body)
		}
		// Sealing plain and opening it gives plain back, on every path.
		s, _, err := b.Seal("q", plain)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := b.Open("q", s, true); err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("round trip of %q: %q %v", plain, back, err)
		}
	})
}

// BenchmarkBodies is the cost of sealing (a publisher's) and opening (a
// consumer's) one 1 KiB body.
func BenchmarkBodies(b *testing.B) {
	k := mustParse(b, "k1:"+key(1))
	bodies := &Bodies{Keys: k, All: true}
	plain := []byte(`{"token":"tok-4111111111111111","blob":"` + string(bytes.Repeat([]byte("x"), 1000)) + `"}`)
	sealed, _, err := bodies.Seal("q", plain)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("seal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, _, err := bodies.Seal("q", plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := bodies.Open("q", sealed, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
