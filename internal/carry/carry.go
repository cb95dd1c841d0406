// Package carry is what the broker transports share about the state a
// message carries in its headers from one attempt to the next: its
// bounded attempt history and its due time.
package carry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// History encodes events as the JSON array a message carries, dropping
// the oldest (and counting them in dropped) until at most max events and
// maxBytes bytes remain.
func History(events []store.Event, dropped, max, maxBytes int) (string, int) {
	if len(events) > max {
		dropped += len(events) - max
		events = events[len(events)-max:]
	}
	for {
		b, err := json.Marshal(events)
		if err != nil {
			return "[]", dropped + len(events)
		}
		if len(b) <= maxBytes || len(events) == 0 {
			return string(b), dropped
		}
		events = events[1:]
		dropped++
	}
}

// CeilMilli is t in Unix milliseconds, rounded up: a due time carried in
// milliseconds never moves earlier.
func CeilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// Tiers returns the delays of a transport's delay queues or retry topics
// for policy p: one per distinct delay of p's schedule (without jitter,
// whole milliseconds, ascending), then delays ten times longer each up to
// p's MaxRetryAfter (default retry.DefaultMaxRetryAfter) for the longer
// waits outside the schedule (a Retry-After, an open breaker), so that
// such a wait takes a few hops rather than hundreds; at most max in all.
func Tiers(p retry.Policy, max int) []time.Duration {
	var tiers []time.Duration
	for _, s := range p.Schedule() {
		d := s.Base.Truncate(time.Millisecond)
		if d < time.Millisecond || slices.Contains(tiers, d) {
			continue
		}
		tiers = append(tiers, d)
	}
	slices.Sort(tiers)
	if len(tiers) > 0 {
		limit := p.MaxRetryAfter
		if limit <= 0 {
			limit = retry.DefaultMaxRetryAfter
		}
		for d := tiers[len(tiers)-1] * 10; d <= limit && len(tiers) < max; d *= 10 {
			tiers = append(tiers, d)
		}
	}
	if len(tiers) > max {
		tiers = tiers[:max]
	}
	return tiers
}

// JobHistory returns j's history: the one it holds, else (a worker
// fetches jobs without their history) the one get reads, when there is
// a get.
func JobHistory(ctx context.Context, j *store.Job, get func(context.Context, int64) (*store.Job, error)) ([]store.Event, error) {
	if len(j.History) > 0 || j.ID == 0 || get == nil {
		return j.History, nil
	}
	full, err := get(ctx, j.ID)
	if err != nil {
		return nil, fmt.Errorf("read the job's history: %w", err)
	}
	return full.History, nil
}
