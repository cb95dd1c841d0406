package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestParseRateLimits: a limit takes a rate and a burst, with or without
// a max; bad ones are refused naming the field; entries of one name are
// one limit only when alike.
func TestParseRateLimits(t *testing.T) {
	ls, err := parseLimits(`[{"name":"pay","kind":"charge","rate":"50/s","burst":10},{"name":"crm","kind":"crm","key":"payload.account","max":5,"rate":"3/1m"},` +
		`{"name":"h","kind":"http","key":"host","rate":"10/s"},{"name":"h","kind":"download","key":"host","rate":"10/s"}]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 4 || ls[0] != (redrive.ConcurrencyLimit{Name: "pay", Kind: "charge", Rate: "50/s", Burst: 10}) || ls[1].Max != 5 || ls[1].Rate != "3/1m" {
		t.Errorf("parseLimits = %+v", ls)
	}
	for _, c := range []struct{ in, want string }{
		{`[{"name":"a","rate":"0/s"}]`, "rate"},
		{`[{"name":"a","rate":"5/0s"}]`, "interval"},
		{`[{"name":"a","rate":"5/48h"}]`, "interval"},
		{`[{"name":"a","rate":"5/s","burst":-1}]`, "burst"},
		{`[{"name":"a","max":2,"burst":3}]`, "burst"},
		{`[{"name":"a","rate":"5/s"},{"name":"a","kind":"x","rate":"6/s"}]`, "twice"},
	} {
		_, err := parseLimits(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, redrive.ErrInvalid) && c.want != "twice" {
			t.Errorf("parseLimits(%s) = %v, want an error naming %q", c.in, err, c.want)
		}
	}
}

// TestHostRateLimit: --host-rate-limit puts the http and download kinds
// under one rate limit per host, after the configured limits; bad values
// are refused naming the setting.
func TestHostRateLimit(t *testing.T) {
	c, err := loadConfig(t, nil, "--host-rate-limit", "10/s", "--host-rate-burst", "3",
		"--concurrency-limits", `[{"name":"api","kind":"http","key":"host","max":2}]`)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.EngineLimits()
	if err != nil {
		t.Fatal(err)
	}
	want := []redrive.ConcurrencyLimit{{Name: "api", Kind: "http", Key: "host", Max: 2},
		{Name: "host-rate", Kind: "http", Key: "host", Rate: "10/s", Burst: 3}, {Name: "host-rate", Kind: "download", Key: "host", Rate: "10/s", Burst: 3}}
	if !slices.Equal(ls, want) {
		t.Errorf("EngineLimits = %+v, want %+v", ls, want)
	}
	if err := redrive.NewClient(nil, redrive.ClientOptions{}).SetLimits(ls); err != nil {
		t.Errorf("SetLimits(EngineLimits) = %v", err)
	}
	c, err = loadConfig(t, map[string]string{"REDRIVE_HOST_RATE_LIMIT": "100/m"})
	if err != nil || c.HostRate.N != 100 || c.HostRate.Per != time.Minute {
		t.Errorf("REDRIVE_HOST_RATE_LIMIT=100/m: %+v, %v", c, err)
	}
	for _, args := range [][]string{{"--host-rate-limit", "0/s"}, {"--host-rate-limit", "5/fortnight"}, {"--host-rate-burst", "0"}} {
		if _, err := loadConfig(t, nil, args...); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: %v, want an error naming the setting", args, err)
		}
	}
	c, err = loadConfig(t, nil, "--host-rate-burst", "2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EngineLimits(); err == nil || !strings.Contains(err.Error(), "host-rate-burst") {
		t.Errorf("a burst without a rate: %v", err)
	}
}

// TestParseLimitsHold: a limit's hold_on_retry_after is read from the
// setting, off when absent.
func TestParseLimitsHold(t *testing.T) {
	ls, err := parseLimits(`[{"name":"h","kind":"http","key":"host","rate":"5/s","hold_on_retry_after":true},{"name":"m","max":2}]`)
	if err != nil || len(ls) != 2 || !ls[0].HoldOnRetryAfter || ls[1].HoldOnRetryAfter {
		t.Fatalf("parseLimits = %+v, %v; want h holding, m not", ls, err)
	}
}
