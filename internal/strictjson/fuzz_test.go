package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzCheck checks Check against a model built on encoding/json's token
// stream: on valid JSON, Check finds a duplicate key exactly when the
// model does (where no lone surrogate, which the model cannot see, makes
// two keys decode alike), never panics, and accepts what it accepted once
// re-encoded.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"kind":"http","kind":"x"}`, `{"a":{"b":[{"c":1,"c":2}]}}`, `{"\u0061":1,"a":2}`,
		`"\ud800"`, `"\ud83d\ude00"`, `[{"a":1},{"a":1}]`, `{"a":"\\ud800"}`, `{"\ud800":1,"\ud801":2}`,
		`{"kind":"http","payload":{"url":"https://x"}}`, `null`, `1e3`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(data, nil)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("Check(%q) = nil for invalid JSON", data)
			}
			return
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("Check(%q) = %v, not an *Error", data, err)
		}
		if e != nil && e.Problem == InvalidUTF8 {
			if utf8.Valid(data) {
				t.Fatalf("Check(%q) = %v for valid UTF-8", data, err)
			}
			return
		}
		if e != nil && e.Problem == LoneSurrogate {
			return
		}
		dup := modelDuplicate(t, data)
		if got := e != nil && e.Problem == DuplicateKey; got != dup {
			t.Fatalf("Check(%q) = %v, model finds a duplicate: %v", data, err, dup)
		}
		if err == nil {
			var v any
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			again, _ := json.Marshal(v)
			if err := Check(again, nil); err != nil {
				t.Fatalf("Check(%q) = %v after re-encoding %q", again, err, data)
			}
		}
	})
}

// modelDuplicate reports whether some object of data holds a key twice.
func modelDuplicate(t *testing.T, data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				markValue(stack)
				continue
			}
			k := tok.(string)
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.expect = false
			continue
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				markValue(stack)
			}
		default:
			markValue(stack)
		}
	}
}

// frame is an open object or array of the model.
type frame struct {
	object bool
	keys   map[string]bool
	expect bool // the next token is a key (or the end of the object)
}

// markValue records that the top object's value was read.
func markValue(stack []*frame) {
	if len(stack) > 0 && stack[len(stack)-1].object {
		stack[len(stack)-1].expect = true
	}
}
