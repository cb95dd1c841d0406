package seal

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, KeySize)) }

func mustParse(t testing.TB, s string) *Keyring {
	k, err := ParseKeys([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRoundTrip: a sealed payload is a JSON string holding no byte of the
// plaintext's words, and opens back under any key of the ring.
func TestRoundTrip(t *testing.T) {
	old := mustParse(t, "k1:"+key(1))
	k := mustParse(t, "# rotated\nk2:"+key(2)+"\nk1:"+key(1)+"\n")
	if k.Current() != "k2" || strings.Join(k.IDs(), ",") != "k2,k1" {
		t.Fatalf("current %q ids %v", k.Current(), k.IDs())
	}
	plain := []byte(`{"card":"4111111111111111","token":"s3cr3t"}`)
	sealedOld, err := old.Seal("billing", plain)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(sealedOld) || !IsSealed(sealedOld) || bytes.Contains(sealedOld, []byte("4111")) || bytes.Contains(sealedOld, []byte("s3cr3t")) {
		t.Fatalf("sealed %s", sealedOld)
	}
	if id, ok := KeyID(sealedOld); !ok || id != "k1" {
		t.Fatalf("KeyID = %q %v", id, ok)
	}
	got, err := k.Open("billing", sealedOld)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open old = %s, %v", got, err)
	}
	sealedNew, _ := k.Seal("billing", plain)
	if id, _ := KeyID(sealedNew); id != "k2" {
		t.Fatalf("new payload under %q", id)
	}
	if _, err := old.Open("billing", sealedNew); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old ring opened a k2 payload: %v", err)
	}
	// Two seals of one payload differ (random nonces).
	again, _ := k.Seal("billing", plain)
	if bytes.Equal(again, sealedNew) {
		t.Fatal("two seals are equal")
	}
}

// TestBoundToQueue: a payload copied into a job of another queue, or
// altered, does not open.
func TestBoundToQueue(t *testing.T) {
	k := mustParse(t, "k1:"+key(1))
	s, _ := k.Seal("a", []byte(`1`))
	if _, err := k.Open("b", s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("opened under another queue: %v", err)
	}
	// Another key under the same id.
	other := mustParse(t, "k1:"+key(9))
	if _, err := other.Open("a", s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("opened with another key of the same id: %v", err)
	}
	for i := len(prefix) + 3; i < len(s)-1; i++ {
		b := bytes.Clone(s)
		b[i] ^= 1
		if _, err := k.Open("a", b); err == nil {
			// Flipping a base64 character's last bits may not change
			// the decoded bytes (the last character's spare bits).
			if i != len(s)-2 {
				t.Fatalf("opened with byte %d altered", i)
			}
		}
	}
}

// TestParseErrors: a bad key list says what is wrong and where.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no current key"},
		{"# only a comment\n\n", "no current key"},
		{"k1" + key(1), "want id:base64key"},
		{"k1:" + base64.StdEncoding.EncodeToString(make([]byte, 16)), "16 bytes, not 32"},
		{"k1:not*base64", "bad base64"},
		{"k1:" + key(1) + "\nk1:" + key(2), `line 2: duplicate key id "k1"`},
		{"k 1:" + key(1), "only letters"},
		{":" + key(1), "1 to 32"},
	} {
		_, err := ParseKeys([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseKeys(%q) = %v, want %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), key(1)) {
			t.Errorf("error shows the key: %v", err)
		}
	}
	// The environment's form: commas, unpadded base64.
	k := mustParse(t, "a:"+strings.TrimRight(key(1), "=")+", b:"+key(2))
	if k.Current() != "a" || len(k.IDs()) != 2 {
		t.Fatalf("ids %v", k.IDs())
	}
}

// TestPolicy: only the chosen queues are sealed; a plaintext that looks
// like an envelope is sealed anyway so that it reads back as given; with
// no keys a sealed payload does not open.
func TestPolicy(t *testing.T) {
	k := mustParse(t, "k1:"+key(1))
	p := &Policy{Keys: k, Queues: map[string]bool{"pay": true}}
	s, _ := p.Seal("pay", []byte(`{"a":1}`))
	if !IsSealed(s) {
		t.Fatal("pay not sealed")
	}
	plain, _ := p.Seal("other", []byte(`{"a":1}`))
	if string(plain) != `{"a":1}` {
		t.Fatalf("other sealed: %s", plain)
	}
	tricky := []byte(`"rdenc:k1:hello"`)
	st, _ := p.Seal("other", tricky)
	if got, err := p.Open("other", st); err != nil || !bytes.Equal(got, tricky) {
		t.Fatalf("look-alike = %s, %v", got, err)
	}
	var none *Policy
	if _, err := none.Open("pay", s); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("opened without keys: %v", err)
	}
	if got, err := none.Open("pay", []byte(`3`)); err != nil || string(got) != "3" {
		t.Fatalf("plain = %s %v", got, err)
	}
}

// FuzzParseKeys: the parser never panics, and a list it accepts has a
// current key that seals and opens.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte("k1:" + key(1)))
	f.Add([]byte("k2:" + key(2) + "\n# c\nk1:" + key(1) + "\n"))
	f.Add([]byte("a:" + key(1) + ",b:" + key(2)))
	f.Add([]byte("k1:AAAA"))
	f.Add([]byte("::::,,,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeys(data)
		if err != nil {
			if k != nil {
				t.Fatal("keyring with an error")
			}
			return
		}
		s, err := k.Seal("q", []byte(`{"x":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := k.Open("q", s); err != nil || string(got) != `{"x":1}` {
			t.Fatalf("round trip: %s %v", got, err)
		}
	})
}

// FuzzOpen: the envelope decoder never panics on any stored bytes, and
// what it opens was sealed by the ring.
func FuzzOpen(f *testing.F) {
	k := mustParse(f, "k1:"+key(1))
	s, _ := k.Seal("q", []byte(`"hi"`))
	f.Add(s)
	f.Add([]byte(`"rdenc:k1:"`))
	f.Add([]byte(`"rdenc:k1:AQ"`))
	f.Add([]byte(`"rdenc::"`))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		KeyID(data)
		got, err := k.Open("q", data)
		if err == nil && string(got) != `"hi"` {
			t.Fatalf("opened forged bytes to %q", got)
		}
		p := &Policy{Keys: k, All: true}
		if _, err := p.Open("q", data); err == nil && IsSealed(data) && string(got) != `"hi"` {
			t.Fatal("policy opened forged bytes")
		}
	})
}

// BenchmarkSealOpen is the cost per job of encryption at rest: one seal
// (enqueue) and one open (fetch) of a small payload.
func BenchmarkSealOpen(b *testing.B) {
	k := mustParse(b, "k1:"+key(1))
	p := []byte(`{"url":"https://example.com/hook","customer":12345}`)
	b.ReportAllocs()
	for b.Loop() {
		s, err := k.Seal("default", p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.Open("default", s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReseal: a rotation re-seals what an older key sealed, seals the
// plaintext of a queue encrypted since it was stored, and leaves what
// is under the current key, the plaintext of a queue not encrypted and
// a malformed envelope (which stays undecryptable) as they are.
func TestReseal(t *testing.T) {
	old := &Policy{Keys: mustParse(t, "k1:"+key(1)), Queues: map[string]bool{"pay": true}}
	p := &Policy{Keys: mustParse(t, "k2:"+key(2)+"\nk1:"+key(1)), Queues: map[string]bool{"pay": true}}
	plain := []byte(`{"card":"4111"}`)
	underOld, _ := old.Seal("pay", plain)
	underNew, _ := p.Seal("pay", plain)
	for _, c := range []struct {
		name, queue string
		stored      []byte
		changed     bool
	}{
		{"sealed under an older key", "pay", underOld, true},
		{"plaintext of a queue encrypted since", "pay", plain, true},
		{"under the current key", "pay", underNew, false},
		{"plaintext of a queue not encrypted", "mail", plain, false},
		{"a malformed envelope", "pay", []byte(`"rdenc:"`), false},
	} {
		out, changed, err := p.Reseal(c.queue, c.stored)
		if err != nil || changed != c.changed {
			t.Errorf("%s: changed %v, %v; want changed %v", c.name, changed, err, c.changed)
			continue
		}
		if !changed {
			if !bytes.Equal(out, c.stored) {
				t.Errorf("%s: left, but returned %s", c.name, out)
			}
			continue
		}
		if id, _ := KeyID(out); id != "k2" {
			t.Errorf("%s: resealed under %q, want k2", c.name, id)
		}
		if got, err := p.Open(c.queue, out); err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: opens to %s, %v", c.name, got, err)
		}
	}
}

// TestSealExport: an export seals under the current key the payloads of
// a sealed queue, those stored sealed and look-alikes, bound to their
// queue; it leaves the others, and seals nothing without keys.
func TestSealExport(t *testing.T) {
	k := mustParse(t, "k2:"+key(2)+"\nk1:"+key(1))
	p := &Policy{Keys: k, Queues: map[string]bool{"pay": true}}
	plain := []byte(`{"a":1}`)
	for _, c := range []struct {
		queue   string
		payload []byte
		stored  bool
		sealed  bool
	}{
		{"pay", plain, false, true},
		{"other", plain, true, true},
		{"other", []byte(`"rdenc:k1:x"`), false, true},
		{"other", plain, false, false},
	} {
		out, id, err := p.SealExport(c.queue, c.payload, c.stored)
		if err != nil {
			t.Fatal(err)
		}
		if !c.sealed {
			if id != "" || !bytes.Equal(out, c.payload) {
				t.Errorf("%s %s: exported %s under %q, want it as it is", c.queue, c.payload, out, id)
			}
			continue
		}
		if id != "k2" || !IsSealed(out) {
			t.Errorf("%s %s: exported %s under %q, want sealed under k2", c.queue, c.payload, out, id)
		}
		if got, err := k.Open(c.queue, out); err != nil || !bytes.Equal(got, c.payload) {
			t.Errorf("%s: opens to %s, %v", c.queue, got, err)
		}
		if _, err := k.Open(c.queue+"x", out); err == nil {
			t.Errorf("%s: opens in another queue", c.queue)
		}
	}
	var none *Policy
	if out, id, err := none.SealExport("pay", plain, true); err != nil || id != "" || !bytes.Equal(out, plain) {
		t.Errorf("without keys: %s %q %v", out, id, err)
	}
}
