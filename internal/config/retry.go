package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/retry"
)

// Bounds of the retry settings.
const (
	// maxRetriesSetting is the most retries a policy may give, the same
	// bound as the API's max_retries.
	maxRetriesSetting = 1000
	// maxRetryDelaySetting bounds every delay of a policy: the DLQ keeps
	// a dead job for 168h by default, so a longer delay makes no sense.
	maxRetryDelaySetting = 7 * 24 * time.Hour
	// maxMultiplierSetting bounds the growth of the delay.
	maxMultiplierSetting = 100
)

// retryPrefix starts the name of every retry setting: --retry-base is
// "base" in a "retry" object of the config file.
const retryPrefix = "retry-"

// retrySettings are the settings of the default retry policy: flags
// --retry-*, variables REDRIVE_RETRY_*, and the "retry" object of the
// config file (also allowed in each queue of its "queues" object). Their
// defaults are retry.DefaultPolicy's.
var retrySettings = []setting{
	{name: "retry-max-retries", def: "3", help: "retries after the first attempt, 0 to 1000 (3: at most 4 attempts)", apply: func(c *Serve, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q: not a whole number", v)
		}
		if n < 0 || n > maxRetriesSetting {
			return fmt.Errorf("%d: want 0 to %d", n, maxRetriesSetting)
		}
		c.Retry.MaxRetries = n
		return nil
	}},
	{name: "retry-base", def: "1s", help: "delay before the first retry, more than 0 (each later delay is multiplied by --retry-multiplier)", apply: func(c *Serve, v string) error {
		d, err := parseRetryDuration(v, false)
		c.Retry.Initial = d
		return err
	}},
	{name: "retry-max", def: "30s", help: "cap of the delay between attempts before jitter, at least --retry-base", apply: func(c *Serve, v string) error {
		d, err := parseRetryDuration(v, false)
		c.Retry.MaxDelay = d
		return err
	}},
	{name: "retry-multiplier", def: "2", help: "growth of the delay from one retry to the next, 1 to 100 (1: constant)", apply: func(c *Serve, v string) error {
		m, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(m) || math.IsInf(m, 0) {
			return fmt.Errorf("%q: not a number", v)
		}
		if m < 1 || m > maxMultiplierSetting {
			return fmt.Errorf("%v: want 1 to %d", m, maxMultiplierSetting)
		}
		c.Retry.Multiplier = m
		return nil
	}},
	{name: "retry-jitter", def: "proportional", help: "how delays are randomised: none, proportional (+-factor), full, equal, decorrelated or additive", apply: func(c *Serve, v string) error {
		j, err := retry.ParseJitter(v)
		if err != nil {
			return fmt.Errorf("%q: want none, proportional, full, equal, decorrelated or additive", v)
		}
		c.Retry.Jitter = j
		return nil
	}},
	{name: "retry-jitter-factor", def: "0.1", help: "spread of proportional jitter, 0 to 1 (0.1: +-10%)", apply: func(c *Serve, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) {
			return fmt.Errorf("%q: not a number", v)
		}
		if f < 0 || f > 1 {
			return fmt.Errorf("%v: want 0 to 1", f)
		}
		c.Retry.JitterFactor = f
		return nil
	}},
	{name: "retry-jitter-max", def: "500ms", help: "most that additive jitter adds to a delay", apply: func(c *Serve, v string) error {
		d, err := parseRetryDuration(v, true)
		c.Retry.JitterMax = d
		return err
	}},
	{name: "retry-max-retry-after", def: "1h", help: "cap on the delay a server's Retry-After asks for", apply: func(c *Serve, v string) error {
		d, err := parseRetryDuration(v, false)
		c.Retry.MaxRetryAfter = d
		return err
	}},
	{name: "retry-after-jitter", def: "1s", help: "most a server's Retry-After is lengthened by, at random, so that jobs rate-limited together do not come back together (never shortened; 0 or off: exactly the Retry-After)", apply: func(c *Serve, v string) error {
		if strings.EqualFold(strings.TrimSpace(v), "off") {
			c.Retry.RetryAfterJitter = retry.NoRetryAfterJitter
			return nil
		}
		d, err := parseRetryDuration(v, true)
		switch d {
		case 0:
			d = retry.NoRetryAfterJitter
		case retry.DefaultRetryAfterJitter:
			d = 0 // the policy's zero value means the default: the default policy stays retry.DefaultPolicy()
		}
		c.Retry.RetryAfterJitter = d
		return err
	}},
	{name: "retry-after-jitter-factor", def: "0.1", help: "largest share of a server's Retry-After added to it at random, above 0 and at most 1 (0.1: up to 10%, within --retry-after-jitter)", apply: func(c *Serve, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) {
			return fmt.Errorf("%q: not a number", v)
		}
		if f <= 0 || f > 1 {
			return fmt.Errorf("%v: want above 0 and at most 1 (turn the jitter off with --retry-after-jitter 0)", f)
		}
		if f == retry.DefaultRetryAfterJitterFactor {
			f = 0 // the default, as in retry.DefaultPolicy()
		}
		c.Retry.RetryAfterJitterFactor = f
		return nil
	}},
}

// parseRetryDuration parses a delay of a retry policy: more than 0 (or
// at least 0 when zeroOK) and at most maxRetryDelaySetting.
func parseRetryDuration(v string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q: not a duration (e.g. 500ms, 1s, 5m)", v)
	}
	switch {
	case d < 0 || d == 0 && !zeroOK:
		want := "more than 0"
		if zeroOK {
			want = "at least 0"
		}
		return 0, fmt.Errorf("%s: want %s and at most %s", d, want, maxRetryDelaySetting)
	case d > maxRetryDelaySetting:
		return 0, fmt.Errorf("%s: want at most %s", d, maxRetryDelaySetting)
	}
	return d, nil
}

// retryKeys lists the keys of a "retry" object of the config file.
func retryKeys() string {
	var names []string
	for _, s := range retrySettings {
		names = append(names, retryKey(s.name))
	}
	return strings.Join(names, ", ")
}

// retryKey is the key of a retry setting in a "retry" object:
// "retry-max-retries" is "max_retries".
func retryKey(name string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, retryPrefix), "-", "_")
}

// normalizeKey maps a key of the config file to a setting name: dots and
// underscores become dashes ("http.allow.private", "shutdown_timeout").
func normalizeKey(k string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(k)
}

// checkRetryDelays checks what no single retry setting can check alone:
// the max delay is at least the base delay. srcs names where each of the
// two came from (a flag, a variable, a key of the config file, or ""
// for the default), so that the message names the setting to change.
func checkRetryDelays(p retry.Policy, baseSrc, maxSrc string) error {
	if p.MaxDelay >= p.Initial {
		return nil
	}
	if maxSrc != "" {
		from := "the default"
		if baseSrc != "" {
			from = baseSrc
		}
		return fmt.Errorf("%s: %s is less than the base delay %s (%s): the max delay must be at least the base delay",
			maxSrc, p.MaxDelay, p.Initial, from)
	}
	return fmt.Errorf("%s: %s is more than the max delay %s (the default): raise the retry max delay too",
		baseSrc, p.Initial, p.MaxDelay)
}

// resolveQueueRetry builds the policy of each queue the config file gives
// a "retry" object: the default policy c.Retry with the queue's own
// settings on top. baseSrc and maxSrc say where c.Retry's delays came
// from. Every queue's policy is checked, also for a queue not served.
func resolveQueueRetry(c *Serve, path string, queues map[string]map[string]string, baseSrc, maxSrc string) (map[string]retry.Policy, error) {
	byName := map[string]setting{}
	for _, s := range retrySettings {
		byName[s.name] = s
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	sort.Strings(names)
	out := map[string]retry.Policy{}
	for _, q := range names {
		vals := queues[q]
		keys := make([]string, 0, len(vals))
		for k := range vals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		scratch := &Serve{Retry: c.Retry}
		qBase, qMax := baseSrc, maxSrc
		where := fmt.Sprintf("%s: queues: queue %q: retry.", path, q)
		for _, k := range keys {
			s, ok := byName[retryPrefix+normalizeKey(k)]
			if !ok {
				return nil, fmt.Errorf("%s: queues: queue %q: retry: unknown setting %q%s (known: %s)", path, q, k, didYouMean(k, splitKeys(retryKeys())), retryKeys())
			}
			if err := s.apply(scratch, vals[k]); err != nil {
				return nil, fmt.Errorf("%s%s: %w", where, k, err)
			}
			switch s.name {
			case "retry-base":
				qBase = where + k
			case "retry-max":
				qMax = where + k
			}
		}
		if err := checkRetryDelays(scratch.Retry, qBase, qMax); err != nil {
			return nil, err
		}
		if err := scratch.Retry.Validate(); err != nil {
			return nil, fmt.Errorf("%s: queues: queue %q: retry: %w", path, q, err) // the settings' bounds should prevent it
		}
		out[q] = scratch.Retry
	}
	return out, nil
}

// DescribePolicy is a policy in one line, for the start-up log.
func DescribePolicy(p retry.Policy) string {
	s := fmt.Sprintf("max_retries=%d base=%s max=%s multiplier=%v jitter=%s", p.MaxRetries, p.Initial, p.MaxDelay, p.Multiplier, p.Jitter)
	switch p.Jitter {
	case retry.JitterProportional:
		s += fmt.Sprintf(" jitter_factor=%v", p.JitterFactor)
	case retry.JitterAdditive:
		s += " jitter_max=" + p.JitterMax.String()
	}
	s += " max_retry_after=" + p.MaxRetryAfter.String()
	if p.RetryAfterJitter < 0 {
		return s + " retry_after_jitter=off"
	}
	return s + fmt.Sprintf(" retry_after_jitter=min(%v*ra,%s)", cmpOr(p.RetryAfterJitterFactor, retry.DefaultRetryAfterJitterFactor),
		cmpOr(p.RetryAfterJitter, retry.DefaultRetryAfterJitter))
}
