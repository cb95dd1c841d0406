// Package transport holds what the broker transports (amqp and kafka)
// share: the bookkeeping of their dead-letter keepers, the pacing of
// their redrives, and the options, validation and handler frame of their
// stored kinds (a broker message kept in a store as a job, which runs by
// sending the message back to its broker).
package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// KeeperTotals are the running totals of one dead-letter queue or topic
// a keeper consumes. The transports' KeeperStats have the same fields,
// and convert from it.
type KeeperTotals struct {
	Kept          int64
	Duplicates    int64
	StoreFailures int64
}

// KeeperCounters count what a keeper did with the dead letters of one
// queue or topic; safe for concurrent use.
type KeeperCounters struct{ kept, duplicates, storeFailures atomic.Int64 }

// Totals returns the counts so far.
func (c *KeeperCounters) Totals() KeeperTotals {
	return KeeperTotals{Kept: c.kept.Load(), Duplicates: c.duplicates.Load(), StoreFailures: c.storeFailures.Load()}
}

// StoreFailed counts a failed attempt to store dead letters.
func (c *KeeperCounters) StoreFailed() { c.storeFailures.Add(1) }

// StoreTimeout bounds one call of a keeper's store.
const StoreTimeout = time.Minute

// Store stores jobs with add and counts the outcome: a failure, or each
// job stored anew (kept) or found already stored (a duplicate). The call
// is not canceled by ctx's end, only bounded by StoreTimeout: a keeper
// acknowledges its dead letters only once they are stored, and a call
// canceled at shutdown would only be made again.
func (c *KeeperCounters) Store(ctx context.Context, add func(context.Context, []store.DeadJob) ([]*store.Job, error),
	jobs []store.DeadJob) ([]*store.Job, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StoreTimeout)
	defer cancel()
	stored, err := add(sctx, jobs)
	if err != nil {
		c.storeFailures.Add(1)
		return nil, err
	}
	for _, j := range stored {
		if j.Existing {
			c.duplicates.Add(1)
		} else {
			c.kept.Add(1)
		}
	}
	return stored, nil
}

// Pause waits for d or for ctx's end, and reports whether d passed: a
// keeper's pause before it asks a failing store again.
func Pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// DefaultRedriveRate is a redrive's rate when its options give none, in
// messages per second.
const DefaultRedriveRate = 100

// Pacer spaces a redrive's sends to a rate. The zero Pacer (of a
// negative rate, or of work that is not paced) does not wait.
type Pacer struct{ tick *time.Ticker }

// NewPacer returns a pacer of rate sends a second: DefaultRedriveRate
// when rate is 0, no bound when it is negative, NaN (see CheckRate), or
// faster than a send a nanosecond (the ticker's resolution). A rate so
// slow that its interval does not fit a time.Duration waits the longest
// one. Stop it when done.
func NewPacer(rate float64) *Pacer {
	if rate == 0 {
		rate = DefaultRedriveRate
	}
	// !(rate > 0) also holds for NaN, as in the transports' code before.
	if !(rate > 0) {
		return &Pacer{}
	}
	interval := float64(time.Second) / rate
	if interval < 1 {
		return &Pacer{}
	}
	// float64(math.MaxInt64) rounds up to 2^63, which does not convert.
	d := time.Duration(math.MaxInt64)
	if interval < float64(math.MaxInt64) {
		d = time.Duration(interval)
	}
	return &Pacer{tick: time.NewTicker(d)}
}

// Wait waits for the next send's turn, or returns ctx's error first.
func (p *Pacer) Wait(ctx context.Context) error {
	if p == nil || p.tick == nil {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.tick.C:
		return nil
	}
}

// Stop releases the pacer's ticker.
func (p *Pacer) Stop() {
	if p != nil && p.tick != nil {
		p.tick.Stop()
	}
}

// CheckMax refuses a negative maximum of dead letters to redrive; pkg
// prefixes the error ("amqp", "kafka").
func CheckMax(pkg string, max int) error {
	if max < 0 {
		return fmt.Errorf("%s: redrive: negative maximum %d", pkg, max)
	}
	return nil
}

// Defaults fills the stored kind's options left zero (or negative): the
// timeout of one send (30s) and the bounds of the history a message
// carries (maxHistory entries, maxHistoryBytes bytes).
func Defaults(timeout *time.Duration, maxHistory, maxHistoryBytes *int, defMaxHistory, defMaxHistoryBytes int) {
	if *timeout <= 0 {
		*timeout = 30 * time.Second
	}
	if *maxHistory <= 0 {
		*maxHistory = defMaxHistory
	}
	if *maxHistoryBytes <= 0 {
		*maxHistoryBytes = defMaxHistoryBytes
	}
}

// Destinations are where a stored kind's jobs may send their messages:
// a queue or a topic among Allowed (any, when Allowed is empty).
type Destinations struct {
	Allowed []string
	// Field is the payload's field that names the destination
	// ("payload.queue"); Noun names one ("queue"); Verb says what the
	// server does with it ("publishes to").
	Field, Noun, Verb string
}

// Check returns a *redrive.FieldError when dest is not allowed.
func (d Destinations) Check(dest string) error {
	if len(d.Allowed) > 0 && !slices.Contains(d.Allowed, dest) {
		return &redrive.FieldError{Field: d.Field, Err: fmt.Errorf("%q is not a %s this server %s (%s)",
			dest, d.Noun, d.Verb, strings.Join(d.Allowed, ", "))}
	}
	return nil
}

// Validate checks a payload of a stored kind: it decodes as a P (else a
// *redrive.FieldError of "payload") whose destination, as dest returns
// it, d allows.
func Validate[P any](raw json.RawMessage, dest func(*P) string, d Destinations) error {
	var p P
	if err := json.Unmarshal(raw, &p); err != nil {
		return &redrive.FieldError{Field: "payload", Err: err}
	}
	return d.Check(dest(&p))
}

// RegisterKind registers h as the handler of kind with r and, when r is
// a redrive.Worker, validate as its client's validator of the kind's
// payloads at enqueue.
func RegisterKind(r redrive.Registrar, kind string, validate redrive.Validator, h redrive.Handler) {
	if w, ok := r.(*redrive.Worker); ok {
		w.Client().SetValidator(kind, validate)
	}
	r.HandleFunc(kind, h)
}

// CheckRate refuses a rate of redrive that is not a number (a
// --rate NaN), which no bound can be read from; pkg prefixes the error.
func CheckRate(pkg string, rate float64) error {
	if math.IsNaN(rate) {
		return fmt.Errorf("%s: redrive: rate %v is not a number", pkg, rate)
	}
	return nil
}
