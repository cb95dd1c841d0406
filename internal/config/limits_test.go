package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

func TestParseLimits(t *testing.T) {
	ls, err := parseLimits(`[{"name":"per-customer","kind":"crm","key":"payload.customer_id","max":5},{"name":"hosts","kind":"http","key":"host","max":10}]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0] != (redrive.ConcurrencyLimit{Name: "per-customer", Kind: "crm", Key: "payload.customer_id", Max: 5}) || ls[1].Key != "host" {
		t.Errorf("parseLimits = %+v", ls)
	}
	for _, c := range []struct{ in, want string }{
		{`{"a":1}`, "want a JSON array"},
		{`[{"name":"a","max":0}]`, "max"},
		{`[{"name":"a","max":-1}]`, "max"},
		{`[{"name":"a","max":2,"key":"customer_id"}]`, "key"},
		{`[{"name":"a","max":2,"kye":"x"}]`, "unknown field"},
		{`[{"max":2}]`, "name"},
		{`[{"name":"a","max":2},{"name":"a","max":3}]`, "twice"},
	} {
		_, err := parseLimits(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseLimits(%s) = %v, want an error naming %q", c.in, err, c.want)
		}
	}
	if _, err := parseLimits(`[{"name":"a","max":0}]`); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("a bad max is %v, want ErrInvalid", err)
	}
}

// FuzzParseLimits: the setting's parser never panics, and what it
// accepts every limit checks.
func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{``, `[]`, `[{"name":"a","max":1}]`, `[{"name":"a","key":"payload.x.y","max":3,"queue":"q","kind":"k"}]`, `[{"name":"a","max":1e9}]`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := parseLimits(s)
		if err != nil {
			return
		}
		for i := range ls {
			if err := ls[i].Check(); err != nil {
				t.Fatalf("parseLimits(%q) accepted %+v: %v", s, ls[i], err)
			}
		}
	})
}
