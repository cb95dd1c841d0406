package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redrivehq/redrive"
)

// maxLimits bounds the concurrency limits of serve's configuration.
const maxLimits = 1000

// limitSettings are serve's fleet-wide concurrency limits: the
// "concurrency-limits" array of the config file (or --concurrency-limits,
// $REDRIVE_CONCURRENCY_LIMITS, as JSON text).
var limitSettings = []setting{
	{name: "concurrency-limits", help: `fleet-wide concurrency limits, as a JSON array of {"name", "queue", "kind", "key" ("", "dependency", "host" or "payload.<field>"), "max"}; a job is under the first that selects it by queue and kind (empty: any), e.g. [{"name":"per-customer","kind":"crm-sync","key":"payload.customer_id","max":5},{"name":"per-host","kind":"http","key":"host","max":10}]`, apply: func(c *Serve, v string) error {
		ls, err := parseLimits(v)
		c.Limits = ls
		return err
	}},
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
	seen := map[string]bool{}
	for i, r := range raw {
		var l redrive.ConcurrencyLimit
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("limit %d: %w (want the fields name, queue, kind, key, max)", i+1, err)
		}
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("limit %d (%q): %w", i+1, l.Name, err)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("limit %d: name %q is used twice", i+1, l.Name)
		}
		seen[l.Name] = true
		out = append(out, l)
	}
	return out, nil
}
