package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// maxLimits bounds the concurrency limits of serve's configuration.
const maxLimits = 1000

// limitSettings are serve's fleet-wide concurrency limits: the
// "concurrency-limits" array of the config file (or --concurrency-limits,
// $REDRIVE_CONCURRENCY_LIMITS, as JSON text).
var limitSettings = []setting{
	{name: "concurrency-limits", help: `fleet-wide concurrency and rate limits, as a JSON array of {"name", "queue", "kind", "key" ("", "dependency", "host" or "payload.<field>"), "max", "rate" (N/interval: "50/s", "3/1m"), "burst", "hold_on_retry_after" (true: a 429 with Retry-After holds the job's group until then)}, each with a max, a rate or both; a job is under the first that selects it by queue and kind (empty: any); entries of one name (same key, max, rate, burst and hold) share the limit, e.g. [{"name":"per-customer","kind":"crm-sync","key":"payload.customer_id","max":5},{"name":"per-host","kind":"http","key":"host","max":10,"rate":"20/s","burst":5}]`, apply: func(c *Serve, v string) error {
		ls, err := parseLimits(v)
		c.Limits = ls
		return err
	}},
	{name: "host-rate-limit", help: `a fleet-wide rate limit per host for the http and download kinds, N/interval ("10/s", "100/m"), shared by both kinds (the limit host-rate, after the concurrency-limits, which win for a job they select); none by default`, apply: func(c *Serve, v string) error {
		r, err := redrive.ParseRate(v)
		c.HostRate = r
		return err
	}},
	{name: "host-rate-burst", help: `how many jobs of one host may start at once under host-rate-limit (1 to 1000000; default 1)`, apply: func(c *Serve, v string) error {
		if v == "" {
			c.HostBurst = 0
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > store.MaxBurst {
			return fmt.Errorf("want a whole number from 1 to %d, got %q", store.MaxBurst, v)
		}
		c.HostBurst = n
		return nil
	}},
}

// EngineLimits returns the limits serve's client puts its jobs under:
// the concurrency-limits, then the per-host rate limit of the http and
// download kinds (host-rate-limit), when set.
func (c *Serve) EngineLimits() ([]redrive.ConcurrencyLimit, error) {
	out := slices.Clone(c.Limits)
	if c.HostRate.N == 0 {
		if c.HostBurst != 0 {
			return nil, fmt.Errorf("host-rate-burst: goes with host-rate-limit")
		}
		return out, nil
	}
	rate := redrive.FormatRate(c.HostRate)
	for _, kind := range []string{"http", "download"} {
		out = append(out, redrive.ConcurrencyLimit{Name: "host-rate", Kind: kind, Key: "host", Rate: rate, Burst: c.HostBurst})
	}
	return out, nil
}

// parseLimits parses the "concurrency-limits" setting: a JSON array of
// limits, each checked as redrive.ConcurrencyLimit.Check checks it. An
// error names the limit and the field.
func parseLimits(v string) ([]redrive.ConcurrencyLimit, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf(`want a JSON array of limits, e.g. [{"name":"per-customer","kind":"crm-sync","key":"payload.customer_id","max":5}], got %s`, clipJSON([]byte(v)))
	}
	if len(raw) > maxLimits {
		return nil, fmt.Errorf("%d limits, the limit is %d", len(raw), maxLimits)
	}
	out := make([]redrive.ConcurrencyLimit, 0, len(raw))
	seen := map[string]redrive.ConcurrencyLimit{}
	for i, r := range raw {
		var l redrive.ConcurrencyLimit
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("limit %d: %w (want the fields name, queue, kind, key, max, rate, burst, hold_on_retry_after)", i+1, err)
		}
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("limit %d (%q): %w", i+1, l.Name, err)
		}
		if prev, ok := seen[l.Name]; ok && (!prev.SameLimit(l) || prev.Queue == l.Queue && prev.Kind == l.Kind) {
			return nil, fmt.Errorf("limit %d: name %q is used twice (entries of one name must be one limit, with one key, max, rate and burst, selecting other queues or kinds)", i+1, l.Name)
		}
		seen[l.Name] = l
		out = append(out, l)
	}
	return out, nil
}
