package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redrivehq/redrive"
)

// maxFairQueues bounds the fair queues of serve's configuration.
const maxFairQueues = 1000

// fairSettings are serve's fair queues: the "fair-queues" array of the
// config file (or --fair-queues, $REDRIVE_FAIR_QUEUES, as JSON text).
var fairSettings = []setting{
	{name: "fair-queues", help: `queues whose jobs start by round robin over a key (a tenant), so that one key's backlog does not hold the others' jobs behind it, as a JSON array of {"queue", "key" ("dependency", "host" or "payload.<field>"), "weights" (an object of key: jobs per round, 1 to 10000; 1 for a key not named)}, e.g. [{"queue":"imports","key":"payload.tenant_id","weights":{"acme":3}}]`, apply: func(c *Serve, v string) error {
		fs, err := parseFairQueues(v)
		c.FairShares = fs
		return err
	}},
}

// parseFairQueues parses the "fair-queues" setting: a JSON array of fair
// shares, each checked as redrive.FairShare.Check checks it. An error
// names the entry and the field.
func parseFairQueues(v string) ([]redrive.FairShare, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf(`want a JSON array of fair queues, e.g. [{"queue":"imports","key":"payload.tenant_id"}], got %s`, clipJSON([]byte(v)))
	}
	if len(raw) > maxFairQueues {
		return nil, fmt.Errorf("%d fair queues, the limit is %d", len(raw), maxFairQueues)
	}
	out := make([]redrive.FairShare, 0, len(raw))
	seen := map[string]bool{}
	for i, r := range raw {
		var f redrive.FairShare
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("fair queue %d: %w (want the fields queue, key, weights)", i+1, err)
		}
		if err := f.Check(); err != nil {
			return nil, fmt.Errorf("fair queue %d (%q): %w", i+1, f.Queue, err)
		}
		if seen[f.Queue] {
			return nil, fmt.Errorf("fair queue %d: queue %q is made fair twice", i+1, f.Queue)
		}
		seen[f.Queue] = true
		out = append(out, f)
	}
	return out, nil
}
