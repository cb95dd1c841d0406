package redrive

import (
	"context"
	"fmt"

	"github.com/redrivehq/redrive/store"
)

// The range of job priorities (Request.Priority). The due jobs of a
// queue start highest priority first, by due time within a priority.
const (
	// MinPriority is the lowest priority: such jobs wait for every other
	// due job of their queue.
	MinPriority = store.MinPriority
	// MaxPriority is the highest priority.
	MaxPriority = store.MaxPriority
	// DefaultPriority is the priority of a job enqueued without one.
	DefaultPriority = store.DefaultPriority
)

// checkPriority refuses a priority out of range with an error wrapping
// ErrInvalid whose *FieldError names the field "priority".
func checkPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%w: %w", ErrInvalid, &FieldError{Field: "priority",
			Err: fmt.Errorf("%d is out of range: want an integer from %d to %d", p, MinPriority, MaxPriority)})
	}
	return nil
}

// SetPriority changes the priority of the job id while it waits (pending
// or scheduled) and returns the job: its next start is ordered by the new
// priority. A running, completed, dead or canceled job's priority cannot
// change: the error wraps ErrConflict. An unknown id is ErrNotFound; a
// priority out of range wraps ErrInvalid (with a *FieldError naming
// "priority"), and nothing changes.
func (c *Client) SetPriority(ctx context.Context, id int64, priority int) (*Job, error) {
	if err := checkPriority(priority); err != nil {
		return nil, err
	}
	j, err := c.store.SetPriority(ctx, id, priority)
	if err != nil {
		return nil, err
	}
	c.log.Info("job priority set", "job", id, "priority", priority)
	return j, nil
}
