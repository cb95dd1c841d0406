package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"
)

// serveConfig is the configuration of `redrive serve`, once every source
// (defaults, config file, environment, flags) is merged and validated.
type serveConfig struct {
	// Addr is the host:port the HTTP server listens on.
	Addr string
	// DB is the SQLite database file, used when DatabaseURL is empty.
	DB string
	// DatabaseURL is the PostgreSQL URL; empty means SQLite.
	DatabaseURL string
	// Schema is the PostgreSQL schema of the store.
	Schema string
	// Token is the bearer token of the API and /metrics ("" for none).
	Token string
	// Queues maps each queue the worker serves to its concurrency.
	Queues map[string]int
	// Workers is the concurrency of a queue listed without one.
	Workers int
	// HTTPAllowPrivate lets http jobs reach loopback and private addresses.
	HTTPAllowPrivate bool
	// HTTPAllowLinkLocal lets http jobs reach link-local and cloud metadata
	// addresses.
	HTTPAllowLinkLocal bool
	// ShutdownTimeout bounds the graceful shutdown.
	ShutdownTimeout time.Duration
	// LogLevel is the level of the JSON logs.
	LogLevel slog.Level

	// queuesSpec is the raw queues setting, resolved once Workers is known.
	queuesSpec string
}

// setting is one configuration setting of `redrive serve`: its flag name,
// which is also its key in the config file, its environment variable, its
// default, its help and how it is applied to the configuration.
type setting struct {
	name  string
	def   string
	help  string
	bool  bool // a boolean flag (--name alone means true)
	apply func(c *serveConfig, v string) error
}

// env is the environment variable of the setting: REDRIVE_ and the name
// upper-cased with dashes and dots as underscores.
func (s setting) env() string {
	return "REDRIVE_" + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(s.name))
}

// configEnv names the config file when --config is not given.
const configEnv = "REDRIVE_CONFIG"

// Bounds of the settings.
const (
	maxConcurrency     = 10000
	maxShutdownTimeout = time.Hour
	maxQueueName       = 200
)

// settings are every setting of `redrive serve`. The global --db flag is
// one of them.
var settings = []setting{
	{name: "addr", def: "127.0.0.1:8080", help: "host:port to listen on (a non-loopback address needs a token)", apply: func(c *serveConfig, v string) error {
		if _, err := listenHostPort(v); err != nil {
			return err
		}
		c.Addr = v
		return nil
	}},
	{name: "db", def: "redrive.db", help: "SQLite database file", apply: func(c *serveConfig, v string) error {
		if strings.TrimSpace(v) == "" {
			return errors.New("empty path")
		}
		c.DB = v
		return nil
	}},
	{name: "database-url", help: "PostgreSQL URL (empty: the SQLite --db)", apply: func(c *serveConfig, v string) error {
		if v != "" {
			if _, err := pgx.ParseConfig(v); err != nil {
				return fmt.Errorf("not a PostgreSQL URL or connection string (%s)", redactURL(v))
			}
		}
		c.DatabaseURL = v
		return nil
	}},
	{name: "schema", def: "redrive", help: "PostgreSQL schema of the store", apply: func(c *serveConfig, v string) error {
		if !schemaRE.MatchString(v) {
			return fmt.Errorf("%q: want a lower-case identifier (a-z, 0-9, _; not starting with a digit) of at most 55 bytes", v)
		}
		c.Schema = v
		return nil
	}},
	{name: "token", help: "bearer token required by the API and /metrics (prefer $REDRIVE_TOKEN: flags show in ps)", apply: func(c *serveConfig, v string) error {
		if v != "" && (strings.TrimSpace(v) != v || strings.ContainsAny(v, " \t\r\n")) {
			return errors.New("must not contain white space")
		}
		if len(v) > 4096 {
			return errors.New("longer than 4096 bytes")
		}
		c.Token = v
		return nil
	}},
	{name: "queues", def: "default", help: `queues to work and their concurrency, e.g. "default=10,webhooks=50" (a queue without =N gets --workers)`, apply: func(c *serveConfig, v string) error {
		if _, err := parseQueues(v, 1); err != nil {
			return err
		}
		c.queuesSpec = v
		return nil
	}},
	{name: "workers", def: "10", help: "concurrency of each queue listed without one", apply: func(c *serveConfig, v string) error {
		n, err := parseConcurrency(v)
		if err != nil {
			return err
		}
		c.Workers = n
		return nil
	}},
	{name: "http-allow-private", def: "true", bool: true, help: "let http jobs reach loopback and private addresses", apply: func(c *serveConfig, v string) error {
		b, err := parseBool(v)
		c.HTTPAllowPrivate = b
		return err
	}},
	{name: "http-allow-link-local", def: "false", bool: true, help: "let http jobs reach link-local and cloud metadata addresses (169.254.169.254...)", apply: func(c *serveConfig, v string) error {
		b, err := parseBool(v)
		c.HTTPAllowLinkLocal = b
		return err
	}},
	{name: "shutdown-timeout", def: "30s", help: "how long running jobs and requests may finish on shutdown", apply: func(c *serveConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q: not a duration (e.g. 30s, 2m)", v)
		}
		if d <= 0 || d > maxShutdownTimeout {
			return fmt.Errorf("%s: want more than 0 and at most %s", d, maxShutdownTimeout)
		}
		c.ShutdownTimeout = d
		return nil
	}},
	{name: "log-level", def: "info", help: "debug, info, warn or error", apply: func(c *serveConfig, v string) error {
		var l slog.Level
		switch strings.ToLower(v) {
		case "debug":
			l = slog.LevelDebug
		case "info":
			l = slog.LevelInfo
		case "warn", "warning":
			l = slog.LevelWarn
		case "error":
			l = slog.LevelError
		default:
			return fmt.Errorf("%q: want debug, info, warn or error", v)
		}
		c.LogLevel = l
		return nil
	}},
}

// schemaRE is what the PostgreSQL store accepts as a schema name.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,54}$`)

// addServeFlags adds the flag of every setting but the global --db.
func addServeFlags(f *pflag.FlagSet) {
	for _, s := range settings {
		if s.name == "db" {
			continue
		}
		help := s.help + " ($" + s.env() + ")"
		if s.bool {
			b, _ := strconv.ParseBool(s.def)
			f.Bool(s.name, b, help)
			continue
		}
		// The flag's default is for --help only: loadServeConfig reads a
		// flag only when it is given, so the environment and the file can
		// set what the flag does not (and --help never prints a secret).
		f.String(s.name, s.def, help)
	}
	f.String("config", "", "JSON config file of settings, keyed by flag name ($"+configEnv+")")
}

// loadServeConfig merges, in increasing precedence, the defaults, the
// config file (--config or $REDRIVE_CONFIG), the environment (REDRIVE_*)
// and the flags set on the command line, and validates each value. An
// error names the bad setting as its source spells it: "--addr: ...",
// "REDRIVE_WORKERS: ...", "redrive.json: workers: ...".
func loadServeConfig(flags *pflag.FlagSet, getenv func(string) string) (*serveConfig, error) {
	c := &serveConfig{}
	byName := map[string]setting{}
	for _, s := range settings {
		byName[s.name] = s
		if err := s.apply(c, s.def); err != nil {
			return nil, fmt.Errorf("default of %s: %w", s.name, err) // a bug
		}
	}
	// The config file.
	path := getenv(configEnv)
	if f := flags.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	}
	if path != "" {
		vals, err := readConfigFile(path)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(vals))
		for k := range vals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			name := strings.ReplaceAll(k, ".", "-")
			s, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("%s: unknown setting %q (known: %s)", path, k, settingNames())
			}
			if err := s.apply(c, vals[k]); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
		}
	}
	// The environment.
	for _, s := range settings {
		if v, ok := lookupEnv(getenv, s.env()); ok {
			if err := s.apply(c, v); err != nil {
				return nil, fmt.Errorf("%s: %w", s.env(), err)
			}
		}
	}
	// The flags given on the command line.
	for _, s := range settings {
		f := flags.Lookup(s.name)
		if f == nil || !f.Changed {
			continue
		}
		if err := s.apply(c, f.Value.String()); err != nil {
			return nil, fmt.Errorf("--%s: %w", s.name, err)
		}
	}
	qs, err := parseQueues(c.queuesSpec, c.Workers)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err) // validated above; cannot happen
	}
	c.Queues = qs
	return c, nil
}

// lookupEnv reads an environment variable; an empty value counts as unset.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func settingNames() string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// maxConfigFile bounds the config file's size.
const maxConfigFile = 1 << 20

// readConfigFile reads a JSON object of settings keyed by flag name. A
// value may be a string, a number or a boolean; "queues" may also be an
// object of queue names to concurrencies.
func readConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigFile)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of settings: %w", path, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%s: not a JSON object of settings (got null)", path)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: unexpected data after the JSON object of settings", path)
	}
	out := map[string]string{}
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		var s string
		var q map[string]int
		switch {
		case json.Unmarshal(v, &s) == nil:
			out[k] = s
		case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'), string(v) == "true", string(v) == "false":
			out[k] = string(v)
		case len(v) > 0 && v[0] == '{' && json.Unmarshal(v, &q) == nil:
			parts := make([]string, 0, len(q))
			for name, n := range q {
				// The object is joined into the name=N,... form: a name
				// holding a separator would silently become other queues.
				if strings.ContainsAny(name, ",=") {
					return nil, fmt.Errorf("%s: %s: queue name %q contains %q or %q", path, k, name, ",", "=")
				}
				parts = append(parts, fmt.Sprintf("%s=%d", name, n))
			}
			sort.Strings(parts)
			out[k] = strings.Join(parts, ",")
		default:
			return nil, fmt.Errorf("%s: %s: want a string, a number or a boolean, got %s", path, k, v)
		}
	}
	return out, nil
}

// parseQueues parses "default=10,webhooks=50"; a queue without "=N" gets
// def.
func parseQueues(s string, def int) (map[string]int, error) {
	qs := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, hasN := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("%q: a queue has no name (want name=N,...)", s)
		}
		if len(name) > maxQueueName {
			return nil, fmt.Errorf("queue name is %d bytes long, the limit is %d", len(name), maxQueueName)
		}
		if strings.IndexFunc(name, unicode.IsControl) >= 0 {
			return nil, fmt.Errorf("queue name %q contains a control character", name)
		}
		if _, dup := qs[name]; dup {
			return nil, fmt.Errorf("queue %q is listed twice", name)
		}
		conc := def
		if hasN {
			var err error
			if conc, err = parseConcurrency(strings.TrimSpace(n)); err != nil {
				return nil, fmt.Errorf("queue %q: %w", name, err)
			}
		}
		qs[name] = conc
	}
	if len(qs) == 0 {
		return nil, errors.New("no queue given (want e.g. default=10,webhooks=50)")
	}
	return qs, nil
}

func parseConcurrency(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q: not a number", v)
	}
	if n < 1 || n > maxConcurrency {
		return 0, fmt.Errorf("%d: want 1 to %d", n, maxConcurrency)
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q: not a boolean (true or false)", v)
	}
	return b, nil
}

// listenHostPort checks a listen address and returns its host.
func listenHostPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: want host:port, e.g. 127.0.0.1:8080 (%v)", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
		return "", fmt.Errorf("%q: host %q is not a host name or IP address", addr, host)
	}
	return host, nil
}

// isLoopback reports whether every address the host stands for is a
// loopback address. An empty host (all interfaces) is not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
