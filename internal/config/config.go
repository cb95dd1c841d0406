// Package config is the configuration of `redrive serve`: every setting
// with its flag, environment variable (REDRIVE_*), config file key and
// default; the merging of the defaults, the JSON config file (--config or
// $REDRIVE_CONFIG), the environment and the flags, in that increasing
// precedence; and the validation of each value, whose errors name the
// setting as its source spells it ("--addr: ...", "REDRIVE_WORKERS: ...",
// "redrive.json: queues: ...").
//
// The command adds the flags to its pflag.FlagSet with AddFlags and calls
// Load once they are parsed; the package knows nothing of cobra. The
// settings live in one file per concern: config.go (the server, the store,
// the engine, logs), retry.go, classify.go, breaker.go, amqp.go,
// kafka.go, download.go, schedules.go and export.go.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/internal/strictjson"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// Serve is the configuration of `redrive serve`, once every source
// (defaults, config file, environment, flags) is merged and validated.
type Serve struct {
	// Addr is the host:port the HTTP server listens on.
	Addr string
	// DB is the SQLite database file, used when DatabaseURL is empty.
	DB string
	// SQLiteSynchronous is the SQLite store's synchronous setting:
	// "full" (every commit is fsynced) or "normal" (fsynced at each
	// checkpoint: a crash of the machine, not of serve, may lose the
	// last commits).
	SQLiteSynchronous string
	// DatabaseURL is the PostgreSQL URL; empty means SQLite.
	DatabaseURL string
	// Schema is the PostgreSQL schema of the store.
	Schema string
	// DatabaseWait is how long serve retries opening PostgreSQL while
	// it is not reachable yet; 0 fails at once.
	DatabaseWait time.Duration
	// Token is the bearer token of the API and /metrics ("" for none),
	// an admin token named "admin".
	Token string
	// Tokens are the named tokens of the API, each with a role, kept as
	// the SHA-256 of the token (tokens.go).
	Tokens []server.Token
	// Payloads encrypts payloads at rest (nil: no payload keys): the
	// stores seal the payloads of its queues and open every sealed one.
	Payloads *seal.Policy
	// payloadKeysFile, payloadKeys and encryptQueues are the settings
	// Payloads is built from (encrypt.go).
	payloadKeysFile, payloadKeys, encryptQueues string
	// AMQPBodies and KafkaBodies are the managed RabbitMQ queues and the
	// kept Kafka topics whose message bodies travel sealed, with the
	// payload keys (nil without keys; with keys and no names, they open
	// and seal nothing), built from amqpEncryptBodies and
	// kafkaEncryptBodies (encrypt.go).
	AMQPBodies, KafkaBodies               *seal.Bodies
	amqpEncryptBodies, kafkaEncryptBodies string
	// Queues maps each queue the worker serves to its concurrency.
	Queues map[string]int
	// Workers is the concurrency of a queue listed without one.
	Workers int
	// HTTPAllowPrivate lets http jobs reach loopback and private addresses.
	// Unless set explicitly, it is on when serve listens on loopback only.
	HTTPAllowPrivate bool
	// AllowedHosts are host names the server answers to besides those of
	// its listen address (see server.Options.AllowedHosts).
	AllowedHosts []string
	// TrustedProxies are the reverse proxies whose X-Forwarded-Proto and
	// X-Forwarded-For are believed.
	TrustedProxies []netip.Prefix
	// HTTPAllowLinkLocal lets http jobs reach link-local and cloud metadata
	// addresses.
	HTTPAllowLinkLocal bool
	// HTTPNoTraceParent stops the http and download kinds from sending
	// the attempt's W3C trace context to their targets.
	HTTPNoTraceParent bool
	// ShutdownTimeout bounds the graceful shutdown.
	ShutdownTimeout time.Duration
	// Lease, CompletedRetention, DLQMaxAge, CleanupInterval and
	// KeyRetention are the engine's (see redrive.WorkerOptions).
	Lease, CompletedRetention, DLQMaxAge, CleanupInterval, KeyRetention time.Duration
	// AuditRetention is how long audit log entries are kept.
	AuditRetention time.Duration
	// Budget is the per-queue retry budget; NoBudget turns it off.
	Budget   retry.BudgetConfig
	NoBudget bool
	// LogLevel is the level of the logs.
	LogLevel slog.Level
	// LogFormat is the format of the logs: "text", "json" or "auto"
	// (text when they go to a terminal, json otherwise).
	LogFormat string
	// Retry is the default retry policy: of every queue without its own,
	// and so of the http kind.
	Retry retry.Policy
	// QueueRetry is the retry policy of each queue served that the config
	// file gives one (its "retry" object on top of Retry).
	QueueRetry map[string]retry.Policy
	// Classify is how failures are classified, by default and per queue
	// (classify.go).
	Classify Classify
	// Breakers are the circuit breakers of dependencies and of the http
	// kind's hosts (breaker.go).
	Breakers Breakers
	// AMQP are the RabbitMQ queues serve manages (--amqp-url).
	AMQP AMQP
	// Kafka are the Kafka topics whose dead letters serve keeps
	// (--kafka-brokers).
	Kafka Kafka
	// Download is the built-in download kind (--download-dir).
	Download Download
	// ExportDir is the folder API folder exports write under
	// (--export-dir); empty refuses them.
	ExportDir string
	// TraceURLTemplate is the URL of a trace in a trace viewer, with
	// {trace_id} where the trace id goes (--trace-url-template): the
	// dashboard links trace ids to it. Empty: no link.
	TraceURLTemplate string
	// RedactHeaders and RedactFields are the patterns of the names of
	// secrets (--redact-headers, --redact-fields: see
	// server.Options.RedactHeaders); empty: none.
	RedactHeaders, RedactFields []string
	// Schedules are the periodic jobs serve declares (schedules.go).
	Schedules []redrive.Periodic
	// Limits are the fleet-wide concurrency limits of the jobs serve's
	// client enqueues (limits.go).
	Limits []redrive.ConcurrencyLimit
	// HostRate and HostBurst are the rate limit per host of the http and
	// download kinds (--host-rate-limit, --host-rate-burst): one limit,
	// named host-rate, keyed on the host of the job's url, shared by the
	// two kinds (limits.go). A zero HostRate is none.
	HostRate  store.LimitRate
	HostBurst int
	// FairShares are the queues serve's client and worker make fair
	// (--fair-queues, fairshare.go).
	FairShares []redrive.FairShare

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
	apply func(c *Serve, v string) error
}

// env is the environment variable of the setting: REDRIVE_ and the name
// upper-cased with dashes and dots as underscores.
func (s setting) env() string {
	return "REDRIVE_" + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(s.name))
}

// FileEnv names the config file when --config is not given.
const FileEnv = "REDRIVE_CONFIG"

// Bounds of the settings.
const (
	maxConcurrency     = 10000
	maxShutdownTimeout = time.Hour
	maxQueueName       = 200
	MaxDatabaseWait    = 24 * time.Hour
)

// settings are every setting of `redrive serve`. The global --db flag is
// one of them; the retry settings are in retry.go.
var settings = append([]setting{
	{name: "addr", def: "127.0.0.1:8080", help: "host:port to listen on (a non-loopback address needs a token)", apply: func(c *Serve, v string) error {
		if _, err := ListenHostPort(v); err != nil {
			return err
		}
		c.Addr = v
		return nil
	}},
	{name: "db", def: "redrive.db", help: "SQLite database file", apply: func(c *Serve, v string) error {
		if strings.TrimSpace(v) == "" {
			return errors.New("empty path")
		}
		c.DB = v
		return nil
	}},
	{name: "sqlite-synchronous", def: "full", help: "SQLite durability: full (every commit fsynced, survives power loss) or normal (fsynced at checkpoints: a crash of the machine may lose the last commits, never corrupts); PostgreSQL ignores it", apply: func(c *Serve, v string) error {
		switch v {
		case "full", "normal":
			c.SQLiteSynchronous = v
			return nil
		}
		return fmt.Errorf("%q: want full or normal", v)
	}},
	{name: "database-url", help: "PostgreSQL URL (empty: the SQLite --db)", apply: func(c *Serve, v string) error {
		if v != "" {
			if _, err := pgx.ParseConfig(v); err != nil {
				return fmt.Errorf("not a PostgreSQL URL or connection string (%s)", RedactURL(v))
			}
		}
		c.DatabaseURL = v
		return nil
	}},
	{name: "schema", def: "redrive", help: "PostgreSQL schema of the store", apply: func(c *Serve, v string) error {
		if !schemaRE.MatchString(v) {
			return fmt.Errorf("%q: want a lower-case identifier (a-z, 0-9, _; not starting with a digit) of at most 55 bytes", v)
		}
		c.Schema = v
		return nil
	}},
	durationSetting("database-wait", "15m", 0, MaxDatabaseWait, "how long serve retries opening PostgreSQL while it cannot be reached (refused, timed out, unknown host, starting up), answering /readyz with 503 meanwhile; 0 fails at once",
		func(c *Serve, d time.Duration) { c.DatabaseWait = d }),
	{name: "token", help: "bearer token required by the API and /metrics (prefer $REDRIVE_TOKEN: flags show in ps)", apply: func(c *Serve, v string) error {
		if v != "" && (strings.TrimSpace(v) != v || strings.ContainsAny(v, " \t\r\n")) {
			return errors.New("must not contain white space")
		}
		if len(v) > 4096 {
			return errors.New("longer than 4096 bytes")
		}
		c.Token = v
		return nil
	}},
	{name: "queues", def: "default", help: `queues to work and their concurrency, e.g. "default=10,webhooks=50" (a queue without =N gets --workers)`, apply: func(c *Serve, v string) error {
		if _, err := parseQueues(v, 1); err != nil {
			return err
		}
		c.queuesSpec = v
		return nil
	}},
	{name: "workers", def: "10", help: "concurrency of each queue listed without one", apply: func(c *Serve, v string) error {
		n, err := parseConcurrency(v)
		if err != nil {
			return err
		}
		c.Workers = n
		return nil
	}},
	{name: "allowed-host", help: "host names the server also answers to, comma-separated (beside localhost, 127.0.0.1, ::1 and the --addr host); a request naming another host is refused (421)", apply: func(c *Serve, v string) error {
		hosts, err := parseHostList(v)
		c.AllowedHosts = hosts
		return err
	}},
	{name: "trusted-proxy", help: "addresses or CIDR prefixes of reverse proxies whose X-Forwarded-Proto and X-Forwarded-For are believed (a Secure session cookie; the client the token-guess throttle counts), comma-separated", apply: func(c *Serve, v string) error {
		ps, err := parsePrefixList(v)
		c.TrustedProxies = ps
		return err
	}},
	{name: "http-allow-private", def: "true", bool: true, help: "let http jobs reach loopback and private addresses (default: on when --addr is a loopback address, off otherwise)", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.HTTPAllowPrivate = b
		return err
	}},
	{name: "http-allow-link-local", def: "false", bool: true, help: "let http jobs reach link-local and cloud metadata addresses (169.254.169.254...)", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.HTTPAllowLinkLocal = b
		return err
	}},
	{name: "http-traceparent", def: "true", bool: true, help: "send the attempt's W3C traceparent (and tracestate) with the requests of http and download jobs, when serve traces", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.HTTPNoTraceParent = !b
		return err
	}},
	{name: "shutdown-timeout", def: "30s", help: "how long running jobs and requests may finish on shutdown", apply: func(c *Serve, v string) error {
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
	durationSetting("lease", "30s", time.Second, 24*time.Hour, "how long a worker leases a job; a killed worker's jobs are rescued when it ends (at once when a worker on the same host finds its process gone)",
		func(c *Serve, d time.Duration) { c.Lease = d }),
	durationSetting("completed-retention", "24h", time.Minute, 10*365*24*time.Hour, "how long completed and canceled jobs are kept",
		func(c *Serve, d time.Duration) { c.CompletedRetention = d }),
	durationSetting("dlq-max-age", "168h", time.Minute, 10*365*24*time.Hour, "how long dead jobs are kept",
		func(c *Serve, d time.Duration) { c.DLQMaxAge = d }),
	durationSetting("cleanup-interval", "24h", time.Minute, 30*24*time.Hour, "how often retention runs",
		func(c *Serve, d time.Duration) { c.CleanupInterval = d }),
	durationSetting("key-retention", "168h", time.Minute, 10*365*24*time.Hour, "how long an idempotency key stays taken after its job's enqueue, even once the job is deleted",
		func(c *Serve, d time.Duration) { c.KeyRetention = d }),
	durationSetting("audit-retention", "2160h", time.Hour, 100*365*24*time.Hour, "how long the audit log keeps an entry (a change made through the API, the dashboard or the CLI)",
		func(c *Serve, d time.Duration) { c.AuditRetention = d }),
	{name: "retry-budget", def: "true", bool: true, help: "keep each queue's retries within a budget (spread out, never dropped, beyond it)", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.NoBudget = !b
		return err
	}},
	{name: "retry-budget-ratio", def: "0.2", help: "share of a queue's recent attempts that may be retries before the budget spreads them", apply: func(c *Serve, v string) error {
		r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(r > 0 && r <= 100) {
			return fmt.Errorf("%q: want a number above 0 and at most 100", v)
		}
		c.Budget.Ratio = r
		return nil
	}},
	{name: "retry-budget-min", def: "100", help: "retries per window a queue may always make, whatever the ratio", apply: func(c *Serve, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 1000000 {
			return fmt.Errorf("%q: want a whole number from 1 to 1000000", v)
		}
		c.Budget.MinRetries = n
		return nil
	}},
	durationSetting("retry-budget-window", "10s", time.Second, time.Hour, "the sliding window the retry budget counts in",
		func(c *Serve, d time.Duration) { c.Budget.Window = d }),
	{name: "log-level", def: "info", help: "debug, info, warn or error", apply: func(c *Serve, v string) error {
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
	{name: "log-format", def: "auto", help: "text, json, or auto: text when standard error is a terminal, json otherwise", apply: func(c *Serve, v string) error {
		f, err := ParseLogFormat(v)
		c.LogFormat = f
		return err
	}},
}, append(append(append(append(append(append(append(append(append(append(append(append(append(retrySettings, classifySettings...), breakerSettings...), amqpSettings...), kafkaSettings...), downloadSettings...), scheduleSettings...), exportSettings...), limitSettings...), fairSettings...), tokenSettings...), traceSettings...), redactSettings...), encryptSettings...)...)

// schemaRE is what the PostgreSQL store accepts as a schema name.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,54}$`)

// AddFlags adds the flag of every setting but the global --db.
func AddFlags(f *pflag.FlagSet) {
	addSettingFlags(f, settings)
}

// addSettingFlags adds the flags of the settings ss (but the global --db)
// and --config; Load reads them (policy explain takes the
// retry settings only).
func addSettingFlags(f *pflag.FlagSet, ss []setting) {
	for _, s := range ss {
		if s.name == "db" {
			continue
		}
		help := s.help + " ($" + s.env() + ")"
		if s.bool {
			b, _ := strconv.ParseBool(s.def)
			f.Bool(s.name, b, help)
			continue
		}
		// The flag's default is for --help only: Load reads a
		// flag only when it is given, so the environment and the file can
		// set what the flag does not (and --help never prints a secret).
		f.String(s.name, s.def, help)
	}
	f.String("config", "", "JSON config file of settings, keyed by flag name ($"+FileEnv+")")
}

// Load merges, in increasing precedence, the defaults, the
// config file (--config or $REDRIVE_CONFIG), the environment (REDRIVE_*)
// and the flags set on the command line, and validates each value. An
// error names the bad setting as its source spells it: "--addr: ...",
// "REDRIVE_WORKERS: ...", "redrive.json: workers: ...".
func Load(flags *pflag.FlagSet, getenv func(string) string) (*Serve, error) {
	c := &Serve{}
	byName := map[string]setting{}
	for _, s := range settings {
		byName[s.name] = s
		if err := s.apply(c, s.def); err != nil {
			return nil, fmt.Errorf("default of %s: %w", s.name, err) // a bug
		}
	}
	// srcs names where each setting given came from, as an error would
	// name it; the settings left at their defaults are absent.
	srcs := map[string]string{}
	// The config file.
	path := getenv(FileEnv)
	if f := flags.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	}
	var file *configFile
	if path != "" {
		var err error
		if file, err = readConfigFile(path); err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(file.vals))
		for k := range file.vals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			name := normalizeKey(k)
			s, ok := byName[name]
			if !ok {
				return nil, unknownSetting(path, k)
			}
			if prev, dup := srcs[name]; dup {
				return nil, fmt.Errorf("%s: %s: the setting %s is given twice (also as %s)", path, k, name, strings.TrimPrefix(prev, path+": "))
			}
			if err := s.apply(c, file.vals[k]); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
			srcs[name] = path + ": " + k
		}
	}
	// The environment.
	for _, s := range settings {
		if v, ok := lookupEnv(getenv, s.env()); ok {
			if err := s.apply(c, v); err != nil {
				return nil, fmt.Errorf("%s: %w", s.env(), err)
			}
			srcs[s.name] = s.env()
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
		srcs[s.name] = "--" + s.name
	}
	// Private addresses are reachable by default only from a server that
	// only loopback clients can drive.
	if _, set := srcs["http-allow-private"]; !set {
		host, _ := ListenHostPort(c.Addr)
		c.HTTPAllowPrivate = IsLoopback(host)
	}
	qs, err := parseQueues(c.queuesSpec, c.Workers)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err) // validated above; cannot happen
	}
	c.Queues = qs
	if err := resolveAMQP(c); err != nil {
		return nil, err
	}
	if err := resolveKafka(c); err != nil {
		return nil, err
	}
	if err := resolveDownload(c, srcs["download-dir"]); err != nil {
		return nil, err
	}
	if err := resolveSchedules(c); err != nil {
		return nil, err
	}
	if err := resolveEncrypt(c); err != nil {
		return nil, err
	}
	// The retry policies: the default one, then each queue's on top.
	if err := checkRetryDelays(c.Retry, srcs["retry-base"], srcs["retry-max"]); err != nil {
		return nil, err
	}
	if err := c.Retry.Validate(); err != nil {
		return nil, fmt.Errorf("retry: %w", err) // the settings' bounds should prevent it
	}
	// The classification, the default one and each queue's on top, and
	// the breakers of the dependencies on top of the default one.
	var queueClassify map[string]map[string]string
	if file != nil {
		queueClassify = file.queueClassify
	}
	if err := resolveClassify(c, path, queueClassify); err != nil {
		return nil, err
	}
	if err := resolveBreakers(c); err != nil {
		return nil, err
	}
	if file != nil && len(file.queueRetry) > 0 {
		all, err := resolveQueueRetry(c, path, file.queueRetry, srcs["retry-base"], srcs["retry-max"])
		if err != nil {
			return nil, err
		}
		// A queue's policy applies whenever it is served; --queues or
		// $REDRIVE_QUEUES may list other queues than the file.
		for q, p := range all {
			if _, served := c.Queues[q]; served {
				if c.QueueRetry == nil {
					c.QueueRetry = map[string]retry.Policy{}
				}
				c.QueueRetry[q] = p
			}
		}
	}
	return c, nil
}

// lookupEnv reads an environment variable; an empty value counts as unset.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// unknownSetting is the error of a config file's key k that names no
// setting: it names the setting k is close to, if any, and lists them
// all.
func unknownSetting(path, k string) error {
	return fmt.Errorf("%s: unknown setting %q%s (known: %s; in a \"retry\" object: %s; in a \"classify\" object: %s; in a \"breaker\" object: %s)",
		path, k, didYouMean(k, fileKeys()), settingNames(), retryKeys(), classifyKeys(), breakerKeys())
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

// configFile is what a config file holds.
type configFile struct {
	// vals are the settings keyed as the file spells them; those of the
	// "retry" object are "retry.<key>".
	vals map[string]string
	// queueRetry holds the "retry" object of each queue of the "queues"
	// object that has one, keyed as the file spells them.
	queueRetry map[string]map[string]string
	// queueClassify holds the "classify" object of each queue of the
	// "queues" object that has one, likewise.
	queueClassify map[string]map[string]string
}

// readConfigFile reads a JSON object of settings keyed by flag name. A
// value may be a string, a number or a boolean. "retry" may be an object
// of retry settings. "queues" may be an object of queue names to a
// concurrency or to an object {"workers": N, "retry": {...}} (both
// optional).
func readConfigFile(path string) (*configFile, error) {
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
	if err := strictjson.Check(b, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := &configFile{vals: map[string]string{}}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// A misspelt key is unknown whatever its value: its value's
		// shape says nothing of what was meant.
		if !isFileKey(k) {
			return nil, unknownSetting(path, k)
		}
	}
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		name := normalizeKey(k)
		if s, ok := scalarValue(v); ok && name != "retry" && name != "classify" && name != "breaker" {
			out.vals[k] = s
			continue
		}
		isObject := len(v) > 0 && v[0] == '{'
		switch {
		case name == "classify" || name == "breaker":
			read := classifyObject
			if name == "breaker" {
				read = breakerObject
			}
			vals, err := read(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
			for sk, sv := range vals {
				out.vals[k+"."+sk] = sv
			}
		case name == "classify-rules" && len(v) > 0 && v[0] == '[', name == "breaker-dependencies" && isObject, name == "schedules" && isObject, name == "download-sources" && isObject, name == "tokens" && isObject, name == "concurrency-limits" && len(v) > 0 && v[0] == '[',
			name == "fair-queues" && len(v) > 0 && v[0] == '[':
			out.vals[k] = string(v) // read as JSON by the setting
		case name == "retry":
			vals, err := retryObject(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
			for rk, rv := range vals {
				out.vals[k+"."+rk] = rv
			}
		case (name == "queues" || name == "amqp-queues") && isObject:
			spec, qr, qc, err := queuesObject(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k, err)
			}
			out.vals[k] = spec
			for q, c := range qc {
				if out.queueClassify == nil {
					out.queueClassify = map[string]map[string]string{}
				}
				if _, dup := out.queueClassify[q]; dup {
					return nil, fmt.Errorf("%s: %s: queue %q: its classification is given twice (in queues and in amqp-queues)", path, k, q)
				}
				out.queueClassify[q] = c
			}
			for q, r := range qr {
				if out.queueRetry == nil {
					out.queueRetry = map[string]map[string]string{}
				}
				if _, dup := out.queueRetry[q]; dup {
					return nil, fmt.Errorf("%s: %s: queue %q: its retry policy is given twice (in queues and in amqp-queues)", path, k, q)
				}
				out.queueRetry[q] = r
			}
		default:
			return nil, fmt.Errorf("%s: %s: want a string, a number or a boolean, got %s", path, k, clipJSON(v))
		}
	}
	return out, nil
}

// scalarValue returns the text of a JSON string, number or boolean.
func scalarValue(v json.RawMessage) (string, bool) {
	var s string
	switch {
	case json.Unmarshal(v, &s) == nil:
		return s, true
	case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'), string(v) == "true", string(v) == "false":
		return string(v), true
	}
	return "", false
}

// retryObject reads a "retry" object: retry settings keyed as in the
// file, each a string or a number.
func retryObject(v json.RawMessage) (map[string]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want an object of retry settings (%s), got %s", retryKeys(), clipJSON(v))
	}
	out := make(map[string]string, len(obj))
	seen := map[string]string{}
	for k, rv := range obj {
		name := normalizeKey(k)
		if !isRetrySetting(name) {
			return nil, fmt.Errorf("unknown retry setting %q%s (known: %s)", k, didYouMean(k, splitKeys(retryKeys())), retryKeys())
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s: given twice (also as %s)", k, prev)
		}
		seen[name] = k
		rv = bytes.TrimSpace(rv)
		s, ok := scalarValue(rv)
		if !ok || string(rv) == "true" || string(rv) == "false" {
			return nil, fmt.Errorf("%s: want a string or a number, got %s", k, clipJSON(rv))
		}
		out[k] = s
	}
	return out, nil
}

// isRetrySetting reports whether name (normalised, without the "retry-"
// prefix) is a retry setting.
func isRetrySetting(name string) bool {
	for _, s := range retrySettings {
		if s.name == retryPrefix+name {
			return true
		}
	}
	return false
}

// queuesObject reads the object form of "queues": each queue name maps to
// its concurrency, or to an object with an optional "workers", an optional
// "retry" object and an optional "classify" object. It returns the queues
// in the name=N,... form (a queue without workers gets --workers), the
// retry settings of the queues that have some and their classification
// settings.
func queuesObject(v json.RawMessage) (string, map[string]map[string]string, map[string]map[string]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil {
		return "", nil, nil, fmt.Errorf("want an object of queue names to concurrencies or to {\"workers\": N, \"retry\": {...}, \"classify\": {...}}: %w", err)
	}
	parts := make([]string, 0, len(obj))
	var qr, qc map[string]map[string]string
	for name, qv := range obj {
		// The object is joined into the name=N,... form: a name holding
		// a separator would silently become other queues.
		if strings.ContainsAny(name, ",=") {
			return "", nil, nil, fmt.Errorf("queue name %q contains %q or %q", name, ",", "=")
		}
		if strings.TrimSpace(name) == "" {
			return "", nil, nil, fmt.Errorf("queue name %q is empty", name)
		}
		qv = bytes.TrimSpace(qv)
		if len(qv) == 0 || qv[0] != '{' {
			n, err := wholeNumber(qv)
			if err != nil {
				return "", nil, nil, fmt.Errorf("queue %q: want a concurrency or an object {\"workers\": N, \"retry\": {...}}, got %s", name, clipJSON(qv))
			}
			parts = append(parts, fmt.Sprintf("%s=%d", name, n))
			continue
		}
		var q map[string]json.RawMessage
		if err := json.Unmarshal(qv, &q); err != nil {
			return "", nil, nil, fmt.Errorf("queue %q: %w", name, err)
		}
		part := name
		for k, fv := range q {
			switch k {
			case "workers":
				n, err := wholeNumber(bytes.TrimSpace(fv))
				if err != nil {
					return "", nil, nil, fmt.Errorf("queue %q: workers: want a whole number, got %s", name, clipJSON(fv))
				}
				part = fmt.Sprintf("%s=%d", name, n)
			case "retry":
				vals, err := retryObject(fv)
				if err != nil {
					return "", nil, nil, fmt.Errorf("queue %q: retry: %w", name, err)
				}
				if qr == nil {
					qr = map[string]map[string]string{}
				}
				// Keyed as parseQueues will name the queue.
				qr[strings.TrimSpace(name)] = vals
			case "classify":
				vals, err := classifyObject(fv)
				if err != nil {
					return "", nil, nil, fmt.Errorf("queue %q: classify: %w", name, err)
				}
				if qc == nil {
					qc = map[string]map[string]string{}
				}
				qc[strings.TrimSpace(name)] = vals
			default:
				return "", nil, nil, fmt.Errorf("queue %q: unknown key %q%s (want workers, retry or classify)", name, k, didYouMean(k, []string{"workers", "retry", "classify"}))
			}
		}
		parts = append(parts, part)
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), qr, qc, nil
}

// wholeNumber decodes a JSON integer.
func wholeNumber(v json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, err
	}
	return n, nil
}

// clipJSON shortens a JSON value for an error message.
func clipJSON(v []byte) string {
	const limit = 80
	if len(v) > limit {
		return string(v[:limit]) + "..."
	}
	return string(v)
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

// ListenHostPort checks a listen address and returns its host.
func ListenHostPort(addr string) (string, error) {
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

// IsLoopback reports whether every address the host stands for is a
// loopback address. An empty host (all interfaces) is not.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseHostList parses a comma-separated list of host names or IP
// addresses (no ports, no wildcards).
func parseHostList(v string) ([]string, error) {
	var out []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
			out = append(out, ip.String())
			continue
		}
		if !hostNameRE.MatchString(h) || len(h) > 253 {
			return nil, fmt.Errorf("%q is not a host name or IP address (no port, no scheme, no wildcard)", h)
		}
		out = append(out, strings.ToLower(strings.TrimSuffix(h, ".")))
	}
	return out, nil
}

// hostNameRE matches a DNS host name.
var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

// parsePrefixList parses a comma-separated list of IP addresses and CIDR
// prefixes.
func parsePrefixList(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if ip, err := netip.ParseAddr(p); err == nil {
			ip = ip.Unmap()
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		pre, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix (e.g. 10.0.0.0/8)", p)
		}
		out = append(out, pre.Masked())
	}
	return out, nil
}

// durationSetting is a setting holding a duration from lo to hi.
func durationSetting(name, def string, lo, hi time.Duration, help string, set func(*Serve, time.Duration)) setting {
	return setting{name: name, def: def, help: help, apply: func(c *Serve, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q: not a duration (e.g. 30s, 2m, 24h)", v)
		}
		if d < lo || d > hi {
			return fmt.Errorf("%s: want from %s to %s", d, lo, hi)
		}
		set(c, d)
		return nil
	}}
}

// AddPolicyFlags adds the flags of the retry, classify and breaker
// settings and --config, which `redrive policy explain` takes to show a
// policy as serve's settings make it (Load reads them).
func AddPolicyFlags(f *pflag.FlagSet) {
	addSettingFlags(f, slices.Concat(retrySettings, classifySettings, breakerSettings))
}
