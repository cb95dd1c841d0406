package payload

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestRoundTrip: bytes come back from their JSON byte for byte, in the
// encoding that fits them.
func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		b   []byte
		enc string
	}{
		{[]byte(`{"a":[1,true]}`), JSON},
		{[]byte(`{"a": 1}`), Text},
		{[]byte("text é"), Text},
		{[]byte{}, Text},
		{[]byte{0, 0xff}, Base64},
	} {
		enc, v := Encode(c.b)
		if enc != c.enc || !json.Valid(v) {
			t.Errorf("%q: encoding %s, JSON %s; want %s", c.b, enc, v, c.enc)
		}
		back, err := Decode("v", "v_encoding", enc, v)
		if err != nil || !bytes.Equal(back, c.b) {
			t.Errorf("%q came back as %q, %v", c.b, back, err)
		}
	}
	if _, err := Decode("v", "v_encoding", JSON, nil); err == nil {
		t.Error("an absent JSON value decoded")
	}
	if _, err := Decode("v", "v_encoding", "zip", []byte(`"x"`)); err == nil {
		t.Error("an unknown encoding decoded")
	}
}

// FuzzDecode: whatever decodes encodes back to a JSON value that decodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range [][2]string{{JSON, `{"a":1}`}, {Text, `"x"`}, {Base64, `"AP8="`}, {"", `"y"`}, {Base64, `"!"`}} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, enc string, v []byte) {
		if !json.Valid(v) {
			return
		}
		b, err := Decode("v", "e", enc, v)
		if err != nil {
			return
		}
		enc2, v2 := Encode(b)
		back, err := Decode("v", "e", enc2, v2)
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("%s %s: %q re-encoded as %s %s came back as %q, %v", enc, v, b, enc2, v2, back, err)
		}
	})
}
