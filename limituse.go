package redrive

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// withLimit fills j.Limit for a job under a concurrency limit that has
// not ended: the limit, its group, the group's use now, and whether the
// job waits on it (due, not running, its group full, or held by its rate
// or a Retry-After until NextStart).
func (c *Client) withLimit(ctx context.Context, j *Job) (*Job, error) {
	switch j.State {
	case store.Pending, store.Scheduled, store.Running:
	default:
		return j, nil
	}
	l, ok, err := c.store.JobLimit(ctx, j.ID)
	if err != nil {
		return nil, fmt.Errorf("redrive: get job %d: its limit: %w", j.ID, err)
	}
	if !ok {
		return j, nil
	}
	now := c.now()
	if !l.NextStart.After(now) {
		l.NextStart = time.Time{}
	}
	full := l.Max > 0 && l.Running >= int64(l.Max)
	l.Waiting = j.State != store.Running && !j.RunAt.After(now) && (full || !l.NextStart.IsZero())
	j.Limit = &l
	return j, nil
}

// withConfigured adds to ls, the limits the store keeps (sorted by name),
// the limits this client is configured with (SetLimits) that it has not
// kept yet, with their configured max and rate and nothing in use (the store keeps
// a limit from the first job put under it: before, none can be running
// or waiting), and gives each limit the client configures its selector.
// The result is sorted by name.
func (c *Client) withConfigured(ls []store.LimitState) []store.LimitState {
	p := c.limits.Load()
	if p == nil {
		return ls
	}
	byName := map[string]int{}
	for i := range ls {
		byName[ls[i].Name] = i
	}
	for _, l := range *p {
		i, ok := byName[l.Name]
		if !ok {
			st := store.LimitState{Name: l.Name, Max: l.Max, HoldOnRetryAfter: l.HoldOnRetryAfter}
			if !l.rate.IsZero() {
				r := l.rate
				st.Rate = &r
			}
			ls = append(ls, st)
			i = len(ls) - 1
		}
		ls[i].Configured = true
		ls[i].Queue, ls[i].Kind, ls[i].Key = l.Queue, l.Kind, l.Key
	}
	sortLimits(ls)
	return ls
}

// sortLimits sorts limits by name.
func sortLimits(ls []store.LimitState) {
	slices.SortFunc(ls, func(a, b store.LimitState) int { return strings.Compare(a.Name, b.Name) })
}

// LimitGroups returns the groups of the limit named name that have a
// running job, the busiest first, n of them at most (1 to
// store.MaxLimitGroups).
func (c *Client) LimitGroups(ctx context.Context, name string, n int) ([]store.LimitGroup, error) {
	g, err := c.store.LimitGroups(ctx, name, n)
	if err != nil {
		return nil, fmt.Errorf("redrive: limit %q: groups: %w", clipName(name), err)
	}
	return g, nil
}
