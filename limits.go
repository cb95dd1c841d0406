package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/redrivehq/redrive/store"
)

// ConcurrencyLimit caps how many jobs run at once, and how many start in
// an interval (Rate), fleet-wide: every process on the store shares it. It applies to the jobs of Queue and
// Kind (empty: any) enqueued through a Client that has it (SetLimits);
// each such job belongs to a group, the value of Key in the job, and at
// most Max jobs of one group run at once. A job whose group is full waits
// without using an attempt and starts, oldest due first, as soon as a job
// of its group ends; a killed worker's jobs free their slots when their
// leases expire and are rescued.
type ConcurrencyLimit struct {
	// Name names the limit in the store, where its max can be changed at
	// run time (redrive limits set): a max set there wins over Max.
	Name string `json:"name"`
	// Queue and Kind select the jobs under the limit; empty matches any.
	Queue string `json:"queue,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Key says what of a job makes its group (see ParseLimitKey): empty
	// for one group of all the jobs selected (a limit per queue or per
	// kind), "payload.<field>" for a field of the payload (a top-level
	// field, or a dotted path into objects: payload.account.id), "dependency"
	// for the job's dependency, "host" for the host of the payload's url
	// field (the http and download kinds).
	Key string `json:"key,omitempty"`
	// Max is how many jobs of one group run at once, from 1 to
	// store.MaxLimit; 0 (only with a Rate) for no cap.
	Max int `json:"max,omitempty"`
	// Rate, when set, is how many jobs of one group start per interval,
	// as ParseRate reads it ("50/s", "3/1m"), fleet-wide: a job its rate
	// holds waits, due, without using an attempt, and starts as soon as
	// the rate allows (a GCRA, see store.LimitRate). A rate set at run
	// time (Client.SetLimitRate, redrive limits set) wins over it.
	Rate string `json:"rate,omitempty"`
	// Burst is how many jobs of one group may start at once after a
	// quiet spell, from 1 to store.MaxBurst; 0 is 1 (starts evenly
	// spaced). Only with a Rate.
	Burst int `json:"burst,omitempty"`
	// HoldOnRetryAfter, when true, makes a failure of one of the limit's
	// jobs classed rate_limited with a Retry-After (an HTTP 429 or 503
	// saying how long to wait) hold the job's whole group, fleet-wide,
	// until the Retry-After (clamped by the retry policy's
	// MaxRetryAfter) has passed: no job of the group starts before,
	// whatever the limit's max and rate, while the other groups run on.
	// Off by default: a group is not always what the server throttles
	// (a limit per queue over many hosts would stop them all for one
	// host's 429). Turn it on when a group is one dependency's quota,
	// such as a limit keyed on the host or the customer's API key. Set
	// at run time (Client.SetLimitHold, redrive limits set --hold), it
	// wins over this, as Max and Rate do.
	HoldOnRetryAfter bool `json:"hold_on_retry_after,omitempty"`
}

// LimitKey is a parsed ConcurrencyLimit.Key.
type LimitKey struct {
	// Source is "", "payload", "dependency" or "host".
	Source string
	// Path is, for a payload key, the field's path.
	Path []string
}

// ParseLimitKey parses a limit's key: "", "dependency", "host" or
// "payload.<field>[.<field>...]", each field non-empty and without white
// space or control characters.
func ParseLimitKey(s string) (LimitKey, error) {
	switch s {
	case "":
		return LimitKey{}, nil
	case "dependency", "host":
		return LimitKey{Source: s}, nil
	}
	rest, ok := strings.CutPrefix(s, "payload.")
	if !ok {
		return LimitKey{}, fmt.Errorf("%w: key %q: want dependency, host or payload.<field>", ErrInvalid, clipName(s))
	}
	path := strings.Split(rest, ".")
	if len(path) > 8 {
		return LimitKey{}, fmt.Errorf("%w: key %q: more than 8 fields deep", ErrInvalid, clipName(s))
	}
	for _, f := range path {
		if f == "" || strings.ContainsFunc(f, func(r rune) bool { return r <= ' ' || r == 0x7f }) || len(f) > MaxNameLength {
			return LimitKey{}, fmt.Errorf("%w: key %q: bad field %q", ErrInvalid, clipName(s), clipName(f))
		}
	}
	return LimitKey{Source: "payload", Path: path}, nil
}

// String returns the key as ParseLimitKey reads it.
func (k LimitKey) String() string {
	if k.Source == "payload" {
		return "payload." + strings.Join(k.Path, ".")
	}
	return k.Source
}

// Check reports, as an error wrapping ErrInvalid that names the field at
// fault, a limit no store keeps.
func (l *ConcurrencyLimit) Check() error {
	if err := CheckName("limit name", l.Name); err != nil {
		return &FieldError{Field: "name", Err: err}
	}
	if l.Queue != "" {
		if err := CheckName("queue", l.Queue); err != nil {
			return &FieldError{Field: "queue", Err: err}
		}
	}
	if l.Kind != "" {
		if err := CheckName("kind", l.Kind); err != nil {
			return &FieldError{Field: "kind", Err: err}
		}
	}
	if _, err := ParseLimitKey(l.Key); err != nil {
		return &FieldError{Field: "key", Err: err}
	}
	r, err := rateOf(l.Rate, l.Burst)
	if err != nil {
		return err
	}
	if l.Max == 0 && r.N > 0 {
		return nil
	}
	if err := store.CheckLimitMax(l.Max); err != nil {
		return &FieldError{Field: "max", Err: fmt.Errorf("%w: max %d is out of range [1, %d] (or 0 with a rate)", ErrInvalid, l.Max, store.MaxLimit)}
	}
	return nil
}

// SameLimit reports whether l and o are one limit: the same name, key,
// max, rate, burst and hold on Retry-After (their queue and kind may differ: such entries of
// a list put the jobs of each selection under the one limit).
func (l ConcurrencyLimit) SameLimit(o ConcurrencyLimit) bool {
	if l.Name != o.Name || l.Key != o.Key || l.Max != o.Max || l.HoldOnRetryAfter != o.HoldOnRetryAfter {
		return false
	}
	a, errA := rateOf(l.Rate, l.Burst)
	b, errB := rateOf(o.Rate, o.Burst)
	return errA == nil && errB == nil && a == b
}

// compiledLimit is a checked limit with its key parsed.
type compiledLimit struct {
	ConcurrencyLimit
	key  LimitKey
	rate store.LimitRate
}

// SetLimits puts the jobs the client enqueues from now on under limits:
// each job under the first limit whose Queue and Kind match it (a job is
// under one limit at most). A limit that does not Check, or two limits of
// one name, refuse the whole list with an error naming the limit and
// field; the client's limits are then unchanged. nil removes them all
// (the jobs enqueued before keep theirs).
func (c *Client) SetLimits(limits []ConcurrencyLimit) error {
	out, err := compileLimits(limits)
	if err != nil {
		return err
	}
	c.limits.Store(&out)
	return nil
}

// compileLimits checks a list of limits as SetLimits takes it and parses
// each one's key and rate.
func compileLimits(limits []ConcurrencyLimit) ([]compiledLimit, error) {
	var out []compiledLimit
	seen := map[string]ConcurrencyLimit{}
	for i := range limits {
		l := limits[i]
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("redrive: limit %d (%q): %w", i+1, clipName(l.Name), err)
		}
		if prev, ok := seen[l.Name]; ok && (!prev.SameLimit(l) || prev.Queue == l.Queue && prev.Kind == l.Kind) {
			return nil, fmt.Errorf("redrive: limit %d: %w", i+1, &FieldError{Field: "name", Err: fmt.Errorf("%w: limit %q named twice (entries of one name must be one limit, with one key, max, rate and burst, selecting other queues or kinds)", ErrInvalid, l.Name)})
		}
		seen[l.Name] = l
		k, _ := ParseLimitKey(l.Key)
		r, _ := rateOf(l.Rate, l.Burst)
		out = append(out, compiledLimit{ConcurrencyLimit: l, key: k, rate: r})
	}
	return out, nil
}

// LimitSet is a checked list of limits, as Client.SetLimits takes it,
// for code that applies limits itself instead of through a store: the
// broker transports' consumers keep them in memory. It is safe for
// concurrent use.
type LimitSet struct{ limits []compiledLimit }

// NewLimitSet checks limits as Client.SetLimits does (a bad limit, or two
// of one name, refuse the whole list with an error naming the limit and
// field) and returns them as a set; nil or none is an empty set.
func NewLimitSet(limits []ConcurrencyLimit) (*LimitSet, error) {
	out, err := compileLimits(limits)
	if err != nil {
		return nil, err
	}
	return &LimitSet{limits: out}, nil
}

// Len returns how many limits the set holds.
func (s *LimitSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.limits)
}

// SelectsQueue reports whether a limit of the set may select jobs of
// queue (its Queue is queue or empty).
func (s *LimitSet) SelectsQueue(queue string) bool {
	if s == nil {
		return false
	}
	for i := range s.limits {
		if q := s.limits[i].Queue; q == "" || q == queue {
			return true
		}
	}
	return false
}

// SelectedLimit is the limit a job is under, and the job's group in it.
type SelectedLimit struct {
	// Name is the limit's name; Group the job's group (the value of the
	// limit's key in the job, "" for a limit without a key).
	Name, Group string
	// Max is how many jobs of the group may run at once (0: no cap).
	Max int
	// Rate is how many jobs of the group may start per interval (the
	// zero rate: none).
	Rate store.LimitRate
	// Hold is the limit's HoldOnRetryAfter: whether a rate_limited
	// failure with a Retry-After holds the group in a store.
	Hold bool
}

// Select returns the limit a job of queue and kind, with payload and
// dependency, is under, as a store applies it at enqueue: the first of
// the set whose Queue and Kind match, and the job's group read from the
// job. ok is false when no limit selects the job. A job whose group
// cannot be read (the payload lacks the field, or holds an object there)
// is an error wrapping ErrInvalid that names the field.
func (s *LimitSet) Select(queue, kind string, payload json.RawMessage, dependency string) (sel SelectedLimit, ok bool, err error) {
	if s == nil {
		return SelectedLimit{}, false, nil
	}
	return selectLimit(s.limits, queue, kind, payload, dependency)
}

// selectLimit is Select on a compiled list.
func selectLimit(limits []compiledLimit, queue, kind string, payload json.RawMessage, dependency string) (SelectedLimit, bool, error) {
	for i := range limits {
		l := &limits[i]
		if (l.Queue != "" && l.Queue != queue) || (l.Kind != "" && l.Kind != kind) {
			continue
		}
		key, err := l.key.of(payload, dependency)
		if err != nil {
			return SelectedLimit{}, false, fmt.Errorf("%w: concurrency limit %q: %w", ErrInvalid, l.Name, err)
		}
		if len(key) > store.MaxLimitName {
			return SelectedLimit{}, false, fmt.Errorf("%w: concurrency limit %q: %s is longer than %d bytes", ErrInvalid, l.Name, l.key, store.MaxLimitName)
		}
		return SelectedLimit{Name: l.Name, Group: key, Max: l.Max, Rate: l.rate, Hold: l.HoldOnRetryAfter}, true, nil
	}
	return SelectedLimit{}, false, nil
}

// Limits returns the client's limits, as SetLimits set them.
func (c *Client) Limits() []ConcurrencyLimit {
	p := c.limits.Load()
	if p == nil {
		return nil
	}
	out := make([]ConcurrencyLimit, len(*p))
	for i, l := range *p {
		out[i] = l.ConcurrencyLimit
	}
	return out
}

// applyLimit puts nj under the first of the client's limits that selects
// it, its group read from the job; a job whose group cannot be read (the
// payload lacks the field, or holds an object there) is refused with an
// error naming the field.
func (c *Client) applyLimit(nj *store.NewJob) error {
	p := c.limits.Load()
	if p == nil {
		return nil
	}
	sel, ok, err := selectLimit(*p, nj.Queue, nj.Kind, nj.Payload, nj.Dependency)
	if err != nil || !ok {
		return err
	}
	nj.Limit, nj.LimitKey, nj.LimitMax, nj.LimitRate, nj.LimitHold = sel.Name, sel.Group, sel.Max, sel.Rate, sel.Hold
	return nil
}

// of reads the group of a job.
func (k LimitKey) of(payload json.RawMessage, dependency string) (string, error) {
	switch k.Source {
	case "":
		return "", nil
	case "dependency":
		return dependency, nil
	case "host":
		var v struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(payload, &v); err != nil || v.URL == "" {
			return "", &FieldError{Field: "payload.url", Err: fmt.Errorf("missing: the limit keys on its host")}
		}
		u, err := url.Parse(v.URL)
		if err != nil || u.Hostname() == "" {
			return "", &FieldError{Field: "payload.url", Err: fmt.Errorf("has no host")}
		}
		return hostKey(u.Hostname()), nil
	}
	field := "payload." + strings.Join(k.Path, ".")
	cur := payload
	for _, f := range k.Path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil || obj == nil {
			return "", &FieldError{Field: field, Err: fmt.Errorf("missing: the payload is not an object there")}
		}
		v, ok := obj[f]
		if !ok {
			return "", &FieldError{Field: field, Err: fmt.Errorf("missing")}
		}
		cur = v
	}
	cur = bytes.TrimSpace(cur)
	if len(cur) == 0 {
		return "", &FieldError{Field: field, Err: fmt.Errorf("missing")}
	}
	switch cur[0] {
	case '"':
		var s string
		if err := json.Unmarshal(cur, &s); err != nil {
			return "", &FieldError{Field: field, Err: err}
		}
		return s, nil
	case '{', '[', 'n':
		return "", &FieldError{Field: field, Err: fmt.Errorf("is an object, an array or null: want a string, number or boolean")}
	}
	if cur[0] == 't' || cur[0] == 'f' {
		return string(cur), nil // a boolean, as written
	}
	n, err := keyNumber(string(cur))
	if err != nil {
		return "", &FieldError{Field: field, Err: err}
	}
	return n, nil // a number, in its shortest form
}

// hostKey returns the group of a URL's host: one name for one host
// however the URL writes it, as a client dials it. A name is lower-cased
// and loses a fully qualified name's trailing dot (api.example.com. is
// api.example.com); a name that is not ASCII is written in the ASCII
// form net/http dials (IDNA's lookup mapping, as its transport applies
// it: bücher.example is xn--bcher-kva.example, full-width letters and
// ideographic full stops are mapped); an IP address is written in its
// canonical form (an IPv6 address compressed, an IPv4-mapped one as the
// IPv4 address it reaches).
func hostKey(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	if !isASCII(h) {
		// net/http dials the name as is when the mapping fails: so does
		// the key.
		if a, err := idna.Lookup.ToASCII(h); err == nil {
			h = a
		}
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// isASCII reports whether s holds only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// LimitStates returns every concurrency limit in the store with its use
// now, and the limits the client is configured with (SetLimits) that no
// job has used yet, with nothing in use.
func (c *Client) LimitStates(ctx context.Context) ([]store.LimitState, error) {
	ls, err := c.store.ListLimits(ctx, c.now())
	if err != nil {
		return nil, fmt.Errorf("redrive: list limits: %w", err)
	}
	return c.withConfigured(ls), nil
}

// SetLimitMax changes, fleet-wide, the max of the limit named name (and
// creates the limit if the store has none of that name). Max 0 removes
// the cap of a limit that has a rate; for a limit without one it is an
// error wrapping store.ErrNoCapNoRate (and ErrInvalid) naming the field
// max, and nothing changes.
func (c *Client) SetLimitMax(ctx context.Context, name string, max int) (store.LimitState, error) {
	if err := CheckName("limit name", name); err != nil {
		return store.LimitState{}, &FieldError{Field: "name", Err: err}
	}
	if max != 0 {
		if err := store.CheckLimitMax(max); err != nil {
			return store.LimitState{}, &FieldError{Field: "max", Err: fmt.Errorf("%w: max %d is out of range [1, %d] (or 0 for no cap, with a rate)", ErrInvalid, max, store.MaxLimit)}
		}
	}
	st, err := c.store.SetLimit(ctx, name, max, c.now())
	if errors.Is(err, store.ErrNoCapNoRate) {
		return store.LimitState{}, &FieldError{Field: "max", Err: fmt.Errorf("%w: limit %q has no rate: removing its max would leave it no limit (set a rate first, or give a max)", ErrInvalid, clipName(name))}
	}
	if err != nil {
		return store.LimitState{}, fmt.Errorf("redrive: set limit: %w", err)
	}
	return st, nil
}

// SetLimitHold turns on or off, fleet-wide, the hold on Retry-After of
// the limit named name (see ConcurrencyLimit.HoldOnRetryAfter); turning
// it off also ends the limit's holds now. A limit the store does not keep
// yet (no job has used it) is an error wrapping ErrNotFound.
func (c *Client) SetLimitHold(ctx context.Context, name string, on bool) (store.LimitState, error) {
	if err := CheckName("limit name", name); err != nil {
		return store.LimitState{}, &FieldError{Field: "name", Err: err}
	}
	st, err := c.store.SetLimitHold(ctx, name, on, c.now())
	if err != nil {
		return store.LimitState{}, fmt.Errorf("redrive: set limit hold: %w", err)
	}
	return st, nil
}

// ChangeLimit changes, fleet-wide and at once, several settings of the
// limit named name: those of ch that are not nil (its max, its rate, its
// hold on Retry-After), in one transaction of the store, so that either
// all take effect or none does (a failure leaves the limit as it was).
// The limit is created if the store has none of that name and ch gives a
// max or a rate. Each setting is checked as SetLimitMax, SetLimitRate and
// SetLimitHold check it, and the limit after the change must keep a max
// or a rate (max 0 with a new rate is fine): a bad one is an error
// wrapping ErrInvalid naming the field, and nothing changes. A hold
// alone on a limit the store does not keep yet is an error wrapping
// ErrNotFound.
func (c *Client) ChangeLimit(ctx context.Context, name string, ch store.LimitChange) (store.LimitState, error) {
	if err := CheckName("limit name", name); err != nil {
		return store.LimitState{}, &FieldError{Field: "name", Err: err}
	}
	if ch.Max == nil && ch.Rate == nil && ch.Hold == nil {
		return store.LimitState{}, &FieldError{Field: "max", Err: fmt.Errorf("%w: no change: give a max, a rate or the hold", ErrInvalid)}
	}
	if ch.Max != nil && *ch.Max != 0 {
		if err := store.CheckLimitMax(*ch.Max); err != nil {
			return store.LimitState{}, &FieldError{Field: "max", Err: fmt.Errorf("%w: max %d is out of range [1, %d] (or 0 for no cap, with a rate)", ErrInvalid, *ch.Max, store.MaxLimit)}
		}
	}
	if ch.Rate != nil {
		r := *ch.Rate
		if r.N == 0 && (r.Per != 0 || r.Burst != 0) {
			return store.LimitState{}, &FieldError{Field: "rate", Err: fmt.Errorf("%w: rate: %d jobs per interval is out of range [1, %d]", ErrInvalid, r.N, store.MaxRateN)}
		}
		if r.N != 0 && r.Burst == 0 {
			r.Burst = 1 // the store keeps the limit's burst
		}
		if err := checkRate(r); err != nil {
			return store.LimitState{}, err
		}
	}
	st, err := c.store.ChangeLimit(ctx, name, ch, c.now())
	if errors.Is(err, store.ErrNoCapNoRate) {
		field, what := "rate", "removing its rate would leave it no limit (give it a max too)"
		if ch.Max != nil && *ch.Max == 0 {
			field, what = "max", "removing its max would leave it no limit (give it a rate too)"
		}
		return store.LimitState{}, &FieldError{Field: field, Err: fmt.Errorf("%w: limit %q: %s", ErrInvalid, clipName(name), what)}
	}
	if err != nil {
		return store.LimitState{}, fmt.Errorf("redrive: change limit: %w", err)
	}
	return st, nil
}
