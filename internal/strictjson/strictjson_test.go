package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type inner struct {
	Queue string `json:"queue"`
}

type embedded struct {
	Since string `json:"since"`
}

type request struct {
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	Filter  *inner          `json:"filter"`
	Jobs    []inner         `json:"jobs"`
	Labels  map[string]any  `json:"labels"`
	Hidden  string          `json:"-"`
	embedded
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name, in string
		problem  Problem
		path     string
	}{
		{"plain", `{"kind":"http","payload":{"url":"x"}}`, 0, ""},
		{"embedded field", `{"since":"1h"}`, 0, ""},
		{"pair of surrogates", `{"kind":"\ud83d\ude00"}`, 0, ""},
		{"same key in two objects", `{"jobs":[{"queue":"a"},{"queue":"b"}]}`, 0, ""},
		{"keys differing in case in a payload", `{"payload":{"a":1,"A":2}}`, 0, ""},
		{"duplicate", `{"kind":"http","kind":"evil"}`, DuplicateKey, "kind"},
		{"duplicate by escape", `{"kind":"http","\u006bind":"evil"}`, DuplicateKey, "kind"},
		{"duplicate in payload", `{"payload":{"a":{"b":1,"b":2}}}`, DuplicateKey, "payload.a.b"},
		{"duplicate in array element", `{"jobs":[{},{"queue":"a","queue":"b"}]}`, DuplicateKey, "jobs[1].queue"},
		{"duplicate in map", `{"labels":{"x":1,"x":1}}`, DuplicateKey, "labels.x"},
		{"upper case", `{"KIND":"http"}`, UnknownKey, "KIND"},
		{"case variant after", `{"kind":"http","Kind":"x"}`, UnknownKey, "Kind"},
		{"nested case", `{"filter":{"Queue":"a"}}`, UnknownKey, "filter.Queue"},
		{"array case", `{"jobs":[{"QUEUE":"a"}]}`, UnknownKey, "jobs[0].QUEUE"},
		{"lone high", `{"kind":"http\ud800"}`, LoneSurrogate, "kind"},
		{"lone low", `{"kind":"\udc00"}`, LoneSurrogate, "kind"},
		{"high then other escape", `{"kind":"\ud800\u0041"}`, LoneSurrogate, "kind"},
		{"two highs", `{"kind":"\ud800\ud800"}`, LoneSurrogate, "kind"},
		{"in payload", `{"payload":["\udfff"]}`, LoneSurrogate, "payload[0]"},
		{"in a key", `{"payload":{"\ud800":1}}`, LoneSurrogate, "payload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v request
			err := Decode([]byte(c.in), &v)
			if c.problem == 0 {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want nil", c.in, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Problem != c.problem || e.Path != c.path {
				t.Fatalf("Decode(%s) = %#v (%v), want problem %d at %q", c.in, err, err, c.problem, c.path)
			}
			if !strings.Contains(e.Error(), c.path) {
				t.Errorf("message %q does not name %q", e.Error(), c.path)
			}
		})
	}
}

func TestDecodeHintsTheCase(t *testing.T) {
	var v request
	err := Decode([]byte(`{"KIND":"http"}`), &v)
	var e *Error
	if !errors.As(err, &e) || e.Want != "kind" {
		t.Fatalf("err = %v, want a hint of \"kind\"", err)
	}
}

func TestDecodeRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, in := range []string{`{"nope":1}`, `{"Hidden":"x"}`, `{"kind":1}`, `{"kind":"a"} x`, `{`, "\"\xff\""} {
		var v request
		if err := Decode([]byte(in), &v); err == nil {
			t.Errorf("Decode(%q) = nil, want an error", in)
		}
	}
}
