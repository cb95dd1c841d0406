package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// FuzzParsePayloadMatch: --match either fails with a message naming the
// flag, or yields a field the store accepts and a JSON scalar value.
func FuzzParsePayloadMatch(f *testing.F) {
	for _, s := range []string{
		"payload.customer_id=42", "payload.customer.id=\"42\"", "payload.status=failed", "payload.ok=true",
		"payload.x=null", "payload.a=", "payload.a={\"b\":1}", "payload.a b=1", "customer_id=42", "payload.=1",
		"payload.a.b.c.d.e.f.g.h.i=1", "payload.a=1=2", "payload.a=\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parsePayloadMatch(s)
		if err != nil {
			if !strings.Contains(err.Error(), "--match") {
				t.Fatalf("error %q does not name --match", err)
			}
			return
		}
		if err := store.CheckPayloadMatch(store.Filter{PayloadField: m.Field, PayloadValue: m.Value}); err != nil {
			t.Fatalf("%q parsed to %q=%s, which the store refuses: %v", s, m.Field, m.Value, err)
		}
		if !json.Valid(m.Value) {
			t.Fatalf("%q: value %s is not JSON", s, m.Value)
		}
	})
}

func TestParsePayloadMatch(t *testing.T) {
	for in, want := range map[string]string{
		"payload.customer_id=42":   `customer_id 42`,
		`payload.customer.id="42"`: `customer.id "42"`,
		"payload.status=failed":    `status "failed"`,
		"payload.ok=true":          `ok true`,
		"payload.note=":            `note ""`,
		"payload.a=1=2":            `a "1=2"`,
	} {
		m, err := parsePayloadMatch(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := m.Field + " " + string(m.Value); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"customer_id=42", "payload.a", "payload.a b=1", "payload.=1"} {
		if _, err := parsePayloadMatch(in); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}
