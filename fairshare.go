package redrive

import (
	"fmt"
	"maps"
	"slices"

	"github.com/redrivehq/redrive/store"
)

// FairShare makes a queue fair: its jobs are started by round robin over
// their keys (tenants), so that one key's backlog does not hold another
// key's jobs behind it. Each job enqueued to Queue through a Client that
// has the fair share (SetFairShares) carries its key, read from the job
// as a ConcurrencyLimit's Key is (ParseLimitKey: "payload.<field>",
// "dependency", "host"); a fetch then takes, in each round, up to a key's
// weight of its due jobs, oldest due first, and goes on to the next key.
// Priorities stay strict: a key's round robin runs within a priority.
// See docs/design.md, "Fair shares".
type FairShare struct {
	// Queue is the queue made fair.
	Queue string `json:"queue"`
	// Key says what of a job is its key: "payload.<field>" (a dotted
	// path), "dependency" or "host" (not empty: a fair queue needs keys).
	Key string `json:"key"`
	// Weights gives keys a share other than 1: a key of weight 3 starts
	// up to three jobs in each round where a key of weight 1 starts one.
	// Each weight is from 1 to store.MaxFairWeight. With Key "host", a
	// name is read as a URL's host is ("API.Example.COM." is
	// "api.example.com", "bücher.example" "xn--bcher-kva.example"), and
	// FairShares returns it so.
	Weights map[string]int `json:"weights,omitempty"`
}

// Check reports, as an error wrapping ErrInvalid that names the field at
// fault, a fair share no store keeps.
func (f *FairShare) Check() error {
	if err := CheckName("queue", f.Queue); err != nil {
		return &FieldError{Field: "queue", Err: err}
	}
	if f.Key == "" {
		return &FieldError{Field: "key", Err: fmt.Errorf("%w: key is empty: want payload.<field>, dependency or host", ErrInvalid)}
	}
	if _, err := ParseLimitKey(f.Key); err != nil {
		return &FieldError{Field: "key", Err: err}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Weights)) {
		if err := store.CheckFairWeight(f.Weights[k]); err != nil {
			return &FieldError{Field: "weights." + clipName(k), Err: err}
		}
		if len(k) > store.MaxLimitName {
			return &FieldError{Field: "weights", Err: fmt.Errorf("%w: key %q is longer than %d bytes", ErrInvalid, clipName(k), store.MaxLimitName)}
		}
	}
	return nil
}

// compiledFair is a checked fair share with its key parsed.
type compiledFair struct {
	FairShare
	key LimitKey
}

// SetFairShares makes the queues of shares fair for the jobs the client
// enqueues from now on, and for its workers' fetches (their weights). A
// share that does not Check, or two of one queue, refuse the whole list
// with an error naming the share and field; the client's fair shares are
// then unchanged. nil removes them all (the jobs enqueued before keep
// their keys, and are still started by round robin, at weight 1).
func (c *Client) SetFairShares(shares []FairShare) error {
	out := map[string]compiledFair{}
	for i := range shares {
		f := shares[i]
		if err := f.Check(); err != nil {
			return fmt.Errorf("redrive: fair share %d (queue %q): %w", i+1, clipName(f.Queue), err)
		}
		if _, ok := out[f.Queue]; ok {
			return fmt.Errorf("redrive: fair share %d: %w", i+1, &FieldError{Field: "queue", Err: fmt.Errorf("%w: queue %q made fair twice", ErrInvalid, f.Queue)})
		}
		k, _ := ParseLimitKey(f.Key)
		f.Weights = maps.Clone(f.Weights)
		if k.Source == "host" {
			w, err := hostWeights(f.Weights)
			if err != nil {
				return fmt.Errorf("redrive: fair share %d (queue %q): %w", i+1, clipName(f.Queue), err)
			}
			f.Weights = w
		}
		out[f.Queue] = compiledFair{FairShare: f, key: k}
	}
	c.fair.Store(&out)
	return nil
}

// hostWeights returns the weights of a fair share keyed on the host under
// the names its hosts' jobs get as keys (hostKey: "API.Example.COM." is
// "api.example.com", "[::1]" is "::1"). Two names of one host with
// different weights are an error naming the field weights.
func hostWeights(weights map[string]int) (map[string]int, error) {
	if weights == nil {
		return nil, nil
	}
	out := make(map[string]int, len(weights))
	from := make(map[string]string, len(weights))
	for _, name := range slices.Sorted(maps.Keys(weights)) {
		h := name
		if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1] // an IPv6 address as a URL writes it
		}
		k := hostKey(h)
		if w, ok := out[k]; ok && w != weights[name] {
			return nil, &FieldError{Field: "weights", Err: fmt.Errorf("%w: %q and %q name one host, %q, with weights %d and %d",
				ErrInvalid, clipName(from[k]), clipName(name), clipName(k), w, weights[name])}
		}
		out[k], from[k] = weights[name], name
	}
	return out, nil
}

// FairShares returns the client's fair shares, sorted by queue.
func (c *Client) FairShares() []FairShare {
	p := c.fair.Load()
	if p == nil {
		return nil
	}
	out := make([]FairShare, 0, len(*p))
	for _, q := range slices.Sorted(maps.Keys(*p)) {
		f := (*p)[q].FairShare
		f.Weights = maps.Clone(f.Weights)
		out = append(out, f)
	}
	return out
}

// applyFair gives nj its fair key when its queue is fair; a job whose
// key cannot be read is refused with an error naming the field.
func (c *Client) applyFair(nj *store.NewJob) error {
	p := c.fair.Load()
	if p == nil {
		return nil
	}
	f, ok := (*p)[nj.Queue]
	if !ok {
		return nil
	}
	key, err := f.key.of(nj.Payload, nj.Dependency)
	if err != nil {
		return fmt.Errorf("%w: fair queue %q: %w", ErrInvalid, nj.Queue, err)
	}
	if len(key) > store.MaxLimitName {
		return fmt.Errorf("%w: fair queue %q: %s is longer than %d bytes", ErrInvalid, nj.Queue, f.key, store.MaxLimitName)
	}
	nj.Fair, nj.FairKey = true, key
	return nil
}

// fairWeights returns the weights a fetch of queue uses: nil when the
// client does not make it fair (the store then finds out whether it has
// fair jobs itself), else the share's weights (empty: all 1).
func (c *Client) fairWeights(queue string) map[string]int {
	p := c.fair.Load()
	if p == nil {
		return nil
	}
	f, ok := (*p)[queue]
	if !ok {
		return nil
	}
	if f.Weights == nil {
		return map[string]int{}
	}
	return f.Weights
}

// withFair gives q its fair share, when the client makes its queue fair.
func (c *Client) withFair(q Queue) Queue {
	p := c.fair.Load()
	if p == nil {
		return q
	}
	if f, ok := (*p)[q.Name]; ok {
		fs := f.FairShare
		fs.Weights = maps.Clone(fs.Weights)
		q.Fair = &fs
	}
	return q
}
