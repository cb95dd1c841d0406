package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/shortdur"
	"github.com/redrivehq/redrive/internal/strictjson"
	"github.com/redrivehq/redrive/rhttp"
	"github.com/redrivehq/redrive/store"
)

// Bounds of the breaker settings.
const (
	maxBreakerFailures = 1_000_000
	maxBreakerProbes   = 1000
	minBreakerDuration = 100 * time.Millisecond
	maxBreakerDuration = 24 * time.Hour
	maxDependencies    = 1000
	maxDependencyHosts = 100
)

// breakerPrefix starts the name of every breaker setting: --breaker-failures
// is "failures" in a "breaker" object of the config file.
const breakerPrefix = "breaker-"

// Breakers is serve's circuit breakers: the configuration of every
// dependency without its own, the dependencies configured by name, and
// which http jobs go through which breaker.
type Breakers struct {
	// Default is the configuration of every breaker without its own (the
	// breaker-* settings); its zero fields are the package defaults.
	Default breaker.Config
	// HTTP puts each http job's request through a breaker: its host's,
	// or that of the dependency its host maps to (--breaker-http).
	HTTP bool
	// Dependencies are the dependencies configured by name
	// (--breaker-dependencies), sorted by name, each with its settings on
	// top of Default.
	Dependencies []DependencyBreaker

	// specs are the dependencies as given, resolved against Default once
	// every source is read.
	specs map[string]dependencySpec
	hosts hostMap
}

// DependencyBreaker is a dependency's breaker, resolved.
type DependencyBreaker struct {
	Name   string
	Hosts  []string // the host patterns of the http jobs that use it, as given
	Config breaker.Config
}

// dependencySpec is one dependency of --breaker-dependencies: the fields
// given, nil for those left to the defaults.
type dependencySpec struct {
	Hosts            []string        `json:"hosts"`
	Failures         *int            `json:"failures"`
	Ratio            *float64        `json:"ratio"`
	MinRequests      *int            `json:"min_requests"`
	Consecutive      json.RawMessage `json:"consecutive"` // a number, "failures" or "off"
	Window           *string         `json:"window"`
	OpenFor          *string         `json:"open_for"`
	Probes           *int            `json:"probes"`
	CountRateLimited *bool           `json:"count_rate_limited"`
}

// breakerSettings are the settings of serve's breakers: flags --breaker-*,
// variables REDRIVE_BREAKER_*, and the "breaker" object of the config file.
var breakerSettings = []setting{
	{name: "breaker-failures", def: "5", help: "failures within --breaker-window that trip a dependency's breaker (together with --breaker-ratio)", apply: func(c *Serve, v string) error {
		n, err := parseBreakerCount(v, 1, maxBreakerFailures)
		c.Breakers.Default.Failures = n
		return err
	}},
	{name: "breaker-ratio", def: "0.5", help: "share of failures among the calls within --breaker-window that trips a breaker (with at least --breaker-failures failures), above 0 and at most 1; 0 or off: the failures alone trip it", apply: func(c *Serve, v string) error {
		r, countOnly, err := parseBreakerRatio(v)
		c.Breakers.Default.FailureRatio, c.Breakers.Default.CountOnly = r, countOnly
		return err
	}},
	{name: "breaker-consecutive", def: "failures", help: "failures in a row (no success between them) that trip a breaker whatever the ratio, so that an outage after a busy spell trips it at once: a number, failures (the value of --breaker-failures) or off", apply: func(c *Serve, v string) error {
		n, err := parseBreakerConsecutive(v)
		c.Breakers.Default.Consecutive = n
		return err
	}},
	{name: "breaker-min-requests", def: "0", help: "calls that must have completed within --breaker-window before the ratio may trip a breaker (0: no minimum beyond --breaker-failures)", apply: func(c *Serve, v string) error {
		n, err := parseBreakerCount(v, 0, maxBreakerFailures)
		c.Breakers.Default.MinRequests = n
		return err
	}},
	{name: "breaker-window", def: "30s", help: "the sliding window a breaker counts failures and calls in", apply: func(c *Serve, v string) error {
		d, err := parseBreakerDuration(v)
		c.Breakers.Default.Window = d
		return err
	}},
	{name: "breaker-open-for", def: "60s", help: "how long a tripped breaker stays open before it lets probes through", apply: func(c *Serve, v string) error {
		d, err := parseBreakerDuration(v)
		c.Breakers.Default.BreakDuration = d
		return err
	}},
	{name: "breaker-probes", def: "1", help: "probe calls a half-open breaker lets through; all must succeed to close it", apply: func(c *Serve, v string) error {
		n, err := parseBreakerCount(v, 1, maxBreakerProbes)
		c.Breakers.Default.HalfOpenProbes = n
		return err
	}},
	{name: "breaker-count-rate-limited", def: "false", bool: true, help: "count rate-limited answers (429, 503 with Retry-After) against breakers; by default they do not count, Retry-After handles them", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.Breakers.Default.CountRateLimited = b
		return err
	}},
	{name: "breaker-http", def: "true", bool: true, help: "put each http job's request through a breaker: its host's, or that of the dependency --breaker-dependencies maps its host to", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.Breakers.HTTP = b
		return err
	}},
	{name: "breaker-dependencies", help: `breakers configured per dependency, as a JSON object of names to settings on top of the --breaker-* ones, with the hosts whose http jobs use it, e.g. {"payments":{"hosts":["api.pay.example","*.pay.example:8443"],"failures":3,"window":"10s","open_for":"30s"}}`, apply: func(c *Serve, v string) error {
		specs, hosts, err := parseDependencies(v)
		c.Breakers.specs, c.Breakers.hosts = specs, hosts
		return err
	}},
}

func parseBreakerCount(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q: not a whole number", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d: want %d to %d", n, lo, hi)
	}
	return n, nil
}

// parseBreakerConsecutive parses a consecutive-failures threshold: a
// number from 1, "failures" (0: the breaker's Failures) or "off"
// (breaker.NoConsecutive).
func parseBreakerConsecutive(v string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "failures", "":
		return 0, nil
	case "off":
		return breaker.NoConsecutive, nil
	}
	n, err := parseBreakerCount(v, 1, maxBreakerFailures)
	if err != nil {
		return 0, fmt.Errorf("%w (or failures, or off)", err)
	}
	return n, nil
}

// parseBreakerRatio parses a failure ratio: above 0 and at most 1, or 0 or
// "off" for count-only breakers.
func parseBreakerRatio(v string) (ratio float64, countOnly bool, err error) {
	s := strings.TrimSpace(v)
	if strings.EqualFold(s, "off") {
		return 0, true, nil
	}
	r, perr := strconv.ParseFloat(s, 64)
	if perr != nil || math.IsNaN(r) {
		return 0, false, fmt.Errorf("%q: not a number (or off)", v)
	}
	if r < 0 || r > 1 {
		return 0, false, fmt.Errorf("%v: want above 0 and at most 1 (0 or off: count failures only)", r)
	}
	if r == 0 {
		return 0, true, nil
	}
	return r, false, nil
}

func parseBreakerDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q: not a duration (e.g. 30s, 5m)", v)
	}
	if d < minBreakerDuration || d > maxBreakerDuration {
		return 0, fmt.Errorf("%s: want from %s to %s", d, minBreakerDuration, maxBreakerDuration)
	}
	return d, nil
}

// parseDependencies parses --breaker-dependencies: a JSON object of
// dependency names to their settings. Each field is checked within the
// bounds of the matching breaker-* setting, and each host pattern parsed;
// a host may map to one dependency only. An error names the dependency and
// the field.
func parseDependencies(v string) (map[string]dependencySpec, hostMap, error) {
	if strings.TrimSpace(v) == "" {
		return nil, hostMap{}, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
		return nil, hostMap{}, fmt.Errorf(`want a JSON object of dependency names to settings, e.g. {"payments":{"hosts":["api.pay.example"],"failures":3}}, got %s`, clipJSON([]byte(v)))
	}
	if err := strictjson.Check([]byte(v), nil); err != nil {
		return nil, hostMap{}, err
	}
	if len(raw) > maxDependencies {
		return nil, hostMap{}, fmt.Errorf("%d dependencies, the limit is %d", len(raw), maxDependencies)
	}
	specs := make(map[string]dependencySpec, len(raw))
	var hosts hostMap
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		if err := checkDependencyName(name); err != nil {
			return nil, hostMap{}, err
		}
		var spec dependencySpec
		if err := strictjson.Decode(raw[name], &spec); err != nil {
			return nil, hostMap{}, fmt.Errorf("dependency %q: want an object of hosts, failures, ratio, consecutive, min_requests, window, open_for, probes, count_rate_limited: %v", name, err)
		}
		if _, err := spec.config(breaker.Config{}); err != nil {
			return nil, hostMap{}, fmt.Errorf("dependency %q: %w", name, err)
		}
		if len(spec.Hosts) > maxDependencyHosts {
			return nil, hostMap{}, fmt.Errorf("dependency %q: hosts: %d hosts, the limit is %d", name, len(spec.Hosts), maxDependencyHosts)
		}
		for _, h := range spec.Hosts {
			p, err := parseHostPattern(h)
			if err != nil {
				return nil, hostMap{}, fmt.Errorf("dependency %q: hosts: %w", name, err)
			}
			if err := hosts.add(p, name); err != nil {
				return nil, hostMap{}, fmt.Errorf("dependency %q: hosts: %w", name, err)
			}
		}
		specs[name] = spec
	}
	return specs, hosts, nil
}

// checkDependencyName checks the name of a dependency: its breaker's name,
// as shown by the API and the metrics.
func checkDependencyName(name string) error {
	if err := store.CheckName("dependency", name); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
	}
	return nil
}

// config returns the dependency's breaker configuration: base with the
// fields the spec gives on top, each checked as its breaker-* setting.
func (s dependencySpec) config(base breaker.Config) (breaker.Config, error) {
	c := base
	if s.Failures != nil {
		if *s.Failures < 1 || *s.Failures > maxBreakerFailures {
			return c, fmt.Errorf("failures: %d: want 1 to %d", *s.Failures, maxBreakerFailures)
		}
		c.Failures = *s.Failures
	}
	if s.Ratio != nil {
		r, countOnly, err := parseBreakerRatio(strconv.FormatFloat(*s.Ratio, 'g', -1, 64))
		if err != nil {
			return c, fmt.Errorf("ratio: %w", err)
		}
		c.FailureRatio, c.CountOnly = r, countOnly
	}
	if s.Consecutive != nil {
		v := string(s.Consecutive)
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		n, err := parseBreakerConsecutive(v)
		if err != nil {
			return c, fmt.Errorf("consecutive: %w", err)
		}
		c.Consecutive = n
	}
	if s.MinRequests != nil {
		if *s.MinRequests < 0 || *s.MinRequests > maxBreakerFailures {
			return c, fmt.Errorf("min_requests: %d: want 0 to %d", *s.MinRequests, maxBreakerFailures)
		}
		c.MinRequests = *s.MinRequests
	}
	for _, f := range []struct {
		name string
		v    *string
		d    *time.Duration
	}{{"window", s.Window, &c.Window}, {"open_for", s.OpenFor, &c.BreakDuration}} {
		if f.v == nil {
			continue
		}
		d, err := parseBreakerDuration(*f.v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.d = d
	}
	if s.Probes != nil {
		if *s.Probes < 1 || *s.Probes > maxBreakerProbes {
			return c, fmt.Errorf("probes: %d: want 1 to %d", *s.Probes, maxBreakerProbes)
		}
		c.HalfOpenProbes = *s.Probes
	}
	if s.CountRateLimited != nil {
		c.CountRateLimited = *s.CountRateLimited
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// resolveBreakers builds each configured dependency's breaker
// configuration on top of the defaults, once every source is read.
func resolveBreakers(c *Serve) error {
	if err := c.Breakers.Default.Validate(); err != nil {
		return fmt.Errorf("breaker: %w", err) // the settings' bounds should prevent it
	}
	c.Breakers.Dependencies = nil
	for _, name := range slices.Sorted(maps.Keys(c.Breakers.specs)) {
		spec := c.Breakers.specs[name]
		cfg, err := spec.config(c.Breakers.Default)
		if err != nil {
			return fmt.Errorf("breaker-dependencies: dependency %q: %w", name, err)
		}
		c.Breakers.Dependencies = append(c.Breakers.Dependencies, DependencyBreaker{Name: name, Hosts: spec.Hosts, Config: cfg})
	}
	return nil
}

// Registry returns the breaker Registry of a serve process: the default
// configuration, and each configured dependency's own.
func (b *Breakers) Registry() *breaker.Registry {
	reg := breaker.NewRegistry(b.Default)
	for _, d := range b.Dependencies {
		reg.Configure(d.Name, d.Config)
	}
	return reg
}

// Dependency returns the breaker configuration named name: a configured
// Dependency's, or the default.
func (b *Breakers) Dependency(name string) (DependencyBreaker, bool) {
	for _, d := range b.Dependencies {
		if d.Name == name {
			return d, true
		}
	}
	return DependencyBreaker{Name: name, Config: b.Default}, false
}

// HTTPDependency names the breaker of an http job's request to u: the
// dependency its host maps to, or "" for the host's own (rhttp.HostKey).
func (b *Breakers) HTTPDependency(u *url.URL) string {
	return b.hosts.lookup(u)
}

// hostPattern is a host of --breaker-dependencies: an exact host name or
// address, or "*." and a domain for its subdomains, with or without a port.
type hostPattern struct {
	host     string // lower case, without the "*." of a wildcard
	wildcard bool
	port     string // "" for any port
}

// String is the pattern as the settings spell it.
func (p hostPattern) String() string {
	h := p.host
	if p.wildcard {
		h = "*." + h
	}
	if p.port == "" {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return net.JoinHostPort(h, p.port)
}

// parseHostPattern parses "api.example.com", "api.example.com:8443",
// "*.example.com", "10.0.0.7", "[::1]:8080".
func parseHostPattern(s string) (hostPattern, error) {
	var p hostPattern
	in := strings.TrimSpace(s)
	notHost := fmt.Errorf("%q is not a host name, *.domain or IP address, with an optional :port (no scheme, no path)", s)
	if strings.ContainsAny(in, "/?#@ ") {
		return p, notHost
	}
	host := in
	if h, port, err := net.SplitHostPort(in); err == nil {
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 {
			return p, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
		host, p.port = h, strconv.Itoa(n)
	}
	host = strings.Trim(host, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		p.host = ip.Unmap().String()
		return p, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.wildcard, host = true, rest
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 || strings.HasSuffix(host, ".") || !hostNameRE.MatchString(host) {
		return p, notHost
	}
	p.host = strings.ToLower(host)
	return p, nil
}

// hostMap maps host patterns to dependency names.
type hostMap struct {
	exact map[hostPattern]string // wildcard false
	wild  []hostPattern          // wildcards, longest domain first
	names map[hostPattern]string // every pattern's dependency
}

func (m *hostMap) add(p hostPattern, name string) error {
	if prev, dup := m.names[p]; dup {
		if prev == name {
			return fmt.Errorf("%s is listed twice", p)
		}
		return fmt.Errorf("%s is also mapped to dependency %q", p, prev)
	}
	if m.names == nil {
		m.names = map[hostPattern]string{}
		m.exact = map[hostPattern]string{}
	}
	m.names[p] = name
	if !p.wildcard {
		m.exact[p] = name
		return nil
	}
	m.wild = append(m.wild, p)
	slices.SortStableFunc(m.wild, func(a, b hostPattern) int {
		if d := len(b.host) - len(a.host); d != 0 {
			return d
		}
		return strings.Compare(b.port, a.port) // a port before any port
	})
	return nil
}

// lookup returns the dependency of a request to u, or "": a pattern with
// u's port wins over one without, an exact host over a wildcard, and the
// longest wildcard domain over a shorter one.
func (m *hostMap) lookup(u *url.URL) string {
	if len(m.names) == 0 {
		return ""
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	port := u.Port()
	if port == "" {
		if _, p, err := net.SplitHostPort(rhttp.HostKey(u)); err == nil {
			port = p
		}
	}
	if name, ok := m.exact[hostPattern{host: host, port: port}]; ok {
		return name
	}
	if name, ok := m.exact[hostPattern{host: host}]; ok {
		return name
	}
	for _, p := range m.wild {
		if (p.port == "" || p.port == port) && strings.HasSuffix(host, "."+p.host) {
			return m.names[p]
		}
	}
	return ""
}

// breakerKeys lists the keys of a "breaker" object of the config file.
func breakerKeys() string {
	var names []string
	for _, s := range breakerSettings {
		names = append(names, breakerKey(s.name))
	}
	return strings.Join(names, ", ")
}

// breakerKey is the key of a breaker setting in a "breaker" object:
// "breaker-open-for" is "open_for".
func breakerKey(name string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, breakerPrefix), "-", "_")
}

// breakerObject reads a "breaker" object of the config file into the
// settings' textual values, keyed as in the file: "dependencies" is an
// object, the others are strings, numbers or booleans.
func breakerObject(v json.RawMessage) (map[string]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want an object of breaker settings (%s), got %s", breakerKeys(), clipJSON(v))
	}
	out := make(map[string]string, len(obj))
	seen := map[string]string{}
	for k, rv := range obj {
		name := breakerPrefix + normalizeKey(k)
		if !isSetting(breakerSettings, name) {
			return nil, fmt.Errorf("unknown breaker setting %q%s (known: %s)", k, didYouMean(k, splitKeys(breakerKeys())), breakerKeys())
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s: given twice (also as %s)", k, prev)
		}
		seen[name] = k
		rv = bytes.TrimSpace(rv)
		if name == "breaker-dependencies" && len(rv) > 0 && rv[0] == '{' {
			out[k] = string(rv)
			continue
		}
		s, ok := scalarValue(rv)
		if !ok {
			return nil, fmt.Errorf("%s: want a string, a number or a boolean, got %s", k, clipJSON(rv))
		}
		out[k] = s
	}
	return out, nil
}

// DescribeBreaker explains a breaker configuration for `policy explain`.
func DescribeBreaker(c breaker.Config) []string {
	d := breaker.DefaultConfig()
	failures, window, ratio := cmpOr(c.Failures, d.Failures), cmpOr(c.Window, d.Window), c.FailureRatio
	if ratio == 0 {
		ratio = d.FailureRatio
	}
	var lines []string
	if c.CountOnly {
		lines = append(lines, fmt.Sprintf("trips on %d failures within %s, whatever the successes (count only)", failures, shortdur.String(window)))
	} else {
		line := fmt.Sprintf("trips on at least %d failures making up at least %s%% of the calls completed within %s",
			failures, strconv.FormatFloat(100*ratio, 'g', 6, 64), shortdur.String(window))
		if c.MinRequests > 0 {
			line += fmt.Sprintf(", once at least %d calls completed", c.MinRequests)
		}
		lines = append(lines, line)
		switch c.Consecutive {
		case breaker.NoConsecutive:
			lines = append(lines, "failures in a row do not trip it on their own (consecutive off)")
		default:
			lines = append(lines, fmt.Sprintf("or on %d failures in a row, each within %s of the previous one, whatever the ratio", cmpOr(c.Consecutive, failures), shortdur.String(window)))
		}
	}
	probes := cmpOr(c.HalfOpenProbes, d.HalfOpenProbes)
	probeText := "1 probe through"
	if probes > 1 {
		probeText = fmt.Sprintf("%d probes through; all must succeed to close it", probes)
	}
	lines = append(lines, fmt.Sprintf("stays open %s, then lets %s", shortdur.String(cmpOr(c.BreakDuration, d.BreakDuration)), probeText))
	if c.CountRateLimited {
		lines = append(lines, "rate-limited answers (429, 503 with Retry-After) count as failures")
	} else {
		lines = append(lines, "rate-limited answers (429, 503 with Retry-After) do not count")
	}
	return lines
}

// cmpOr returns v, or def when v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// BreakerJSON is a breaker configuration as `policy explain --json` writes
// it.
type BreakerJSON struct {
	Dependency  string   `json:"dependency"`
	Configured  bool     `json:"configured"`
	Hosts       []string `json:"hosts"`
	Failures    int      `json:"failures"`
	Ratio       float64  `json:"ratio"`
	CountOnly   bool     `json:"count_only"`
	MinRequests int      `json:"min_requests"`
	// Consecutive is the failures in a row that trip the breaker (0: off).
	Consecutive      int     `json:"consecutive"`
	WindowMS         float64 `json:"window_ms"`
	OpenForMS        float64 `json:"open_for_ms"`
	Probes           int     `json:"probes"`
	CountRateLimited bool    `json:"count_rate_limited"`
}

// BreakerToJSON is the breaker d (configured: by the settings, not the
// default) as `policy explain --json` writes it.
func BreakerToJSON(d DependencyBreaker, configured bool) BreakerJSON {
	def := breaker.DefaultConfig()
	c := d.Config
	out := BreakerJSON{Dependency: d.Name, Configured: configured, Hosts: d.Hosts,
		Failures: cmpOr(c.Failures, def.Failures), CountOnly: c.CountOnly, MinRequests: c.MinRequests,
		Consecutive: breakerConsecutive(c),
		WindowMS:    ms(cmpOr(c.Window, def.Window)), OpenForMS: ms(cmpOr(c.BreakDuration, def.BreakDuration)),
		Probes: cmpOr(c.HalfOpenProbes, def.HalfOpenProbes), CountRateLimited: c.CountRateLimited}
	if out.Hosts == nil {
		out.Hosts = []string{}
	}
	if !c.CountOnly {
		out.Ratio = cmpOr(c.FailureRatio, def.FailureRatio)
	}
	return out
}

// breakerConsecutive is the failures in a row that trip a breaker
// configured by c, 0 when none do on their own.
func breakerConsecutive(c breaker.Config) int {
	if c.CountOnly || c.Consecutive == breaker.NoConsecutive {
		return 0
	}
	return cmpOr(c.Consecutive, cmpOr(c.Failures, breaker.DefaultConfig().Failures))
}
