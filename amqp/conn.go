package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/retry"
)

// ErrClosed is returned by a Conn, and by the publishers and consumers on
// it, once the Conn was closed or gave up reconnecting.
var ErrClosed = errors.New("amqp: connection closed")

// DefaultReconnect returns the default reconnection policy: 90 attempts,
// 10 s apart (15 minutes), the profile of long-lived broker clients.
func DefaultReconnect() retry.Policy {
	return retry.Policy{MaxRetries: 90, Initial: 10 * time.Second, Multiplier: 1, MaxDelay: 10 * time.Second,
		Jitter: retry.JitterNone}
}

// ConnOptions configure a Conn. Zero fields take the defaults given.
type ConnOptions struct {
	// Reconnect is the policy of connection attempts: Dial makes one
	// attempt and then up to Reconnect.MaxRetries more, Reconnect's delays
	// apart, and so does the Conn after it loses its connection. Default
	// DefaultReconnect().
	Reconnect *retry.Policy
	// Name is shown by the broker as the connection's name (default
	// "redrive").
	Name string
	// Heartbeat is the AMQP heartbeat interval (default 10s).
	Heartbeat time.Duration
	// Logger receives the connection's logs (default slog.Default()).
	Logger *slog.Logger
}

// Conn is a connection to RabbitMQ that reconnects by itself. Publishers
// and consumers take channels from it; when the connection is lost, their
// channels close, and the next Channel call waits for the new connection.
// Every attempt is logged with its number and error; when Reconnect's
// attempts are all used, an error is logged and the Conn is closed for
// good (ErrClosed).
type Conn struct {
	url    string
	target string // the URL without credentials, for logs
	cfg    amqp091.Config
	opts   ConnOptions
	log    *slog.Logger

	mu      sync.Mutex
	conn    *amqp091.Connection // nil while reconnecting
	changed chan struct{}       // closed (and replaced) whenever conn or err changes
	err     error               // set once the Conn is closed for good
	version string

	reconnects atomic.Int64
	done       chan struct{} // closed by Close
	closeOnce  sync.Once
}

// Dial connects to the broker at url (amqp:// or amqps://), retrying by
// opts.Reconnect until it succeeds, its attempts are used, or ctx ends.
func Dial(ctx context.Context, rawURL string, opts ConnOptions) (*Conn, error) {
	c, err := newConn(rawURL, opts)
	if err != nil {
		return nil, err
	}
	conn, err := c.connect(ctx, "connecting")
	if err != nil {
		return nil, err
	}
	c.set(conn, nil)
	go c.watch(conn)
	return c, nil
}

// Open returns a Conn to the broker at rawURL at once, and connects in
// the background by opts.Reconnect, logging every failed attempt; Channel
// calls (and so publishers and consumers) wait until it is connected.
// Use it where the broker may come up after the program, as redrive
// serve does; use Dial where a program cannot start without the broker.
// Only an invalid URL or option is an error.
func Open(rawURL string, opts ConnOptions) (*Conn, error) {
	c, err := newConn(rawURL, opts)
	if err != nil {
		return nil, err
	}
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		conn, err := c.connect(ctx, "connecting")
		cancel()
		if err != nil {
			c.set(nil, fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		select {
		case <-c.done: // closed meanwhile
			conn.Close()
			return
		default:
		}
		c.set(conn, nil)
		c.watch(conn)
	}()
	return c, nil
}

// newConn validates the URL and options and returns an unconnected Conn.
func newConn(rawURL string, opts ConnOptions) (*Conn, error) {
	if _, err := amqp091.ParseURI(rawURL); err != nil {
		// The parser's error quotes the URL, password included.
		return nil, fmt.Errorf("amqp: invalid URL %s: %s", Redact(rawURL), strings.ReplaceAll(err.Error(), rawURL, Redact(rawURL)))
	}
	if opts.Reconnect == nil {
		p := DefaultReconnect()
		opts.Reconnect = &p
	}
	if err := opts.Reconnect.Validate(); err != nil {
		return nil, fmt.Errorf("amqp: reconnect policy: %w", err)
	}
	if opts.Name == "" {
		opts.Name = "redrive"
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName(opts.Name)
	c := &Conn{url: rawURL, target: Redact(rawURL), opts: opts, log: opts.Logger, changed: make(chan struct{}),
		done: make(chan struct{}),
		cfg:  amqp091.Config{Heartbeat: opts.Heartbeat, Locale: "en_US", Properties: props}}
	return c, nil
}

// Redact returns the URL without its password, fit for logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}

// connect makes the attempts of the reconnect policy.
func (c *Conn) connect(ctx context.Context, what string) (*amqp091.Connection, error) {
	p := *c.opts.Reconnect
	attempts := p.MaxRetries + 1
	var prev time.Duration
	for n := 1; ; n++ {
		conn, err := amqp091.DialConfig(c.url, c.cfg)
		if err == nil {
			if n > 1 || what != "connecting" {
				c.log.Info("amqp: connected", "broker", c.target, "attempt", n)
			}
			return conn, nil
		}
		if n >= attempts {
			c.log.Error("amqp: giving up: every connection attempt failed", "broker", c.target, "attempts", n, "error", err)
			return nil, fmt.Errorf("amqp: %s to %s: %d attempts failed, the last with: %w", what, c.target, n, err)
		}
		d := p.Delay(n-1, prev, nil)
		prev = d
		c.log.Warn("amqp: connection attempt failed; retrying", "broker", c.target, "attempt", n, "max_attempts", attempts,
			"delay", d, "error", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("amqp: %s to %s: %w (after %d attempts, the last failed with: %v)", what, c.target, ctx.Err(), n, err)
		case <-c.done:
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
	}
}

// set installs a connection (or none) and an error, and wakes the waiters.
func (c *Conn) set(conn *amqp091.Connection, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = conn
	if err != nil && c.err == nil {
		c.err = err
	}
	if conn != nil {
		if v, ok := conn.Properties["version"].(string); ok {
			c.version = v
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// watch reconnects whenever the connection is lost, until Close.
func (c *Conn) watch(conn *amqp091.Connection) {
	for {
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		var cause *amqp091.Error
		select {
		case cause = <-closed:
		case <-c.done:
			return
		}
		select {
		case <-c.done:
			return
		default:
		}
		c.log.Warn("amqp: connection lost; reconnecting", "broker", c.target, "error", errText(cause))
		c.set(nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		next, err := c.connect(ctx, "reconnecting")
		cancel()
		if err != nil {
			c.set(nil, fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		c.reconnects.Add(1)
		c.set(next, nil)
		conn = next
	}
}

func errText(e *amqp091.Error) string {
	if e == nil {
		return "closed"
	}
	return e.Error()
}

// Channel opens a channel on the current connection, waiting for a
// reconnection under way. It fails with ErrClosed once the Conn is closed
// or gave up.
func (c *Conn) Channel(ctx context.Context) (*amqp091.Channel, error) {
	for {
		c.mu.Lock()
		conn, err, changed := c.conn, c.err, c.changed
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if conn != nil {
			ch, err := conn.Channel()
			if err == nil {
				return ch, nil
			}
			if !conn.IsClosed() {
				return nil, fmt.Errorf("amqp: open a channel: %w", err)
			}
			// The connection just closed: wait for the watcher's verdict.
			select {
			case <-changed:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ServerVersion returns the broker's version as it announced it, e.g.
// "3.12.1" ("" if it announced none).
func (c *Conn) ServerVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Reconnects returns how many times the Conn reconnected after losing its
// connection.
func (c *Conn) Reconnects() int64 { return c.reconnects.Load() }

// ConnState is what a Conn knows of its connection now, for health checks
// and dashboards.
type ConnState struct {
	// Broker is the broker's URL without credentials.
	Broker string `json:"broker"`
	// Connected reports whether a connection is open now; false while
	// connecting or reconnecting, and once the Conn gave up or closed.
	Connected bool `json:"connected"`
	// Reconnects counts the connections lost and made again.
	Reconnects int64 `json:"reconnects"`
	// Error is set once the Conn is closed for good: it gave up
	// reconnecting (every attempt failed), or Close was called.
	Error string `json:"error,omitempty"`
}

// State returns the connection's state now.
func (c *Conn) State() ConnState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ConnState{Broker: c.target, Connected: c.conn != nil && !c.conn.IsClosed() && c.err == nil,
		Reconnects: c.reconnects.Load()}
	if c.err != nil {
		s.Error = c.err.Error()
	}
	return s
}

// Close closes the connection for good. Channels taken from it close.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() { first = true; close(c.done) })
	if !first {
		return nil
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	c.set(nil, ErrClosed)
	if conn != nil && !conn.IsClosed() {
		return conn.Close()
	}
	return nil
}

// version is a broker version as major.minor.
type version struct{ major, minor int }

func parseVersion(s string) (version, bool) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return version{}, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return version{}, false
	}
	return version{maj, minor}, true
}

func (v version) atLeast(major, minor int) bool {
	return v.major > major || (v.major == major && v.minor >= minor)
}
