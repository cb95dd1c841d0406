package redrive_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// TestLimitKeyNumbers: a number read as a limit's key is its exact value
// in its shortest form: 5, 5.0, 5e0 and the string "5" are one group; a
// string is taken as written; large integers keep every digit.
func TestLimitKeyNumbers(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "crm", Key: "payload.customer", Max: 5}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ raw, key string }{
		{`5`, "5"}, {`5.0`, "5"}, {`5.000`, "5"}, {`5e0`, "5"}, {`50e-1`, "5"}, {`0.5E1`, "5"}, {`"5"`, "5"},
		{`"5.0"`, "5.0"}, {`" 5"`, " 5"},
		{`-0`, "0"}, {`0.0`, "0"}, {`-0.0e5`, "0"}, {`-5`, "-5"}, {`-5.50`, "-5.5"},
		{`1.25e2`, "125"}, {`1e3`, "1000"}, {`12.5e-3`, "0.0125"}, {`0.001`, "0.001"},
		{`12345678901234567890`, "12345678901234567890"}, {`12345678901234567891`, "12345678901234567891"},
		{`1e300`, "1e300"}, {`-1.5e-300`, "-15e-301"},
		{`true`, "true"}, {`false`, "false"},
	} {
		nj, err := c.Prepare(redrive.Request{Kind: "crm", Payload: json.RawMessage(`{"customer":` + tc.raw + `}`)}, time.Now())
		if err != nil || nj.LimitKey != tc.key {
			t.Errorf("customer %s: key %q, %v; want %q", tc.raw, nj.LimitKey, err, tc.key)
		}
	}
	// An exponent no key could hold is refused, naming the field.
	_, err := c.Prepare(redrive.Request{Kind: "crm", Payload: json.RawMessage(`{"customer":1e999999999999}`)}, time.Now())
	var fe *redrive.FieldError
	if !asFieldError(err, &fe) || fe.Field != "payload.customer" {
		t.Errorf("customer 1e999999999999: %v, want an error naming payload.customer", err)
	}
}

func asFieldError(err error, fe **redrive.FieldError) bool { return errors.As(err, fe) }

// TestLimitHostKeyOneHost: the host key names a host once, whatever way
// a URL writes it: a fully qualified name's trailing dot and an IPv6
// address's written form do not make another group (the same server,
// reached through either, would otherwise get max jobs per form).
func TestLimitHostKeyOneHost(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "hosts", Kind: "http", Key: "host", Max: 2}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct{ url, want string }{
		{"https://api.example.com/x", "api.example.com"},
		{"https://API.Example.COM./x", "api.example.com"},
		{"https://api.example.com.:443/x", "api.example.com"},
		{"http://[::1]:8080/", "::1"},
		{"http://[0:0:0:0:0:0:0:1]/", "::1"},
		{"http://[::FFFF:127.0.0.1]/", "127.0.0.1"},
		{"http://127.0.0.1/", "127.0.0.1"},
	} {
		nj, err := c.Prepare(redrive.Request{Kind: "http", Payload: map[string]any{"url": tc.url}}, now)
		if err != nil || nj.LimitKey != tc.want {
			t.Errorf("group of %s = %q, %v; want %q", tc.url, nj.LimitKey, err, tc.want)
		}
	}
}

// TestLimitHostKeyIDN: an internationalized host name is one group
// however the URL writes it: in Unicode, in its ASCII (punycode) form,
// in full-width letters or with an ideographic full stop. net/http dials
// each through the same IDNA mapping (idna.Lookup), so they reach one
// host, and a per-host limit must count them together.
func TestLimitHostKeyIDN(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "hosts", Kind: "http", Key: "host", Max: 2}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct{ url, want string }{
		{"https://xn--bcher-kva.example/x", "xn--bcher-kva.example"},
		{"https://XN--BCHER-KVA.example./x", "xn--bcher-kva.example"},
		{"https://bücher.example/x", "xn--bcher-kva.example"},
		{"https://BÜCHER.example:443/x", "xn--bcher-kva.example"},
		{"https://bücher.example./x", "xn--bcher-kva.example"},
		{"https://b%C3%BCcher.example/x", "xn--bcher-kva.example"}, // percent-encoded
		{"https://ＥＸＡＭＰＬＥ.com/x", "example.com"},
		{"https://example。com/x", "example.com"},
	} {
		nj, err := c.Prepare(redrive.Request{Kind: "http", Payload: map[string]any{"url": tc.url}}, now)
		if err != nil || nj.LimitKey != tc.want {
			t.Errorf("group of %s = %q, %v; want %q", tc.url, nj.LimitKey, err, tc.want)
		}
	}
}
