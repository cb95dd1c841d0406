package redrive

import "context"

// RunNow makes the job id, scheduled (delayed, or waiting for a retry),
// due at once and returns it (a job already overdue keeps its earlier
// due time, and so its place in the queue): it becomes pending, without using an
// attempt, keeping its attempt count, retry count and history, and the
// local workers of its queue are woken. A pending job is returned
// unchanged. A running, completed, dead or canceled job cannot: the
// error wraps ErrConflict. An unknown id is ErrNotFound.
func (c *Client) RunNow(ctx context.Context, id int64) (*Job, error) {
	j, err := c.store.RunNow(ctx, id, c.now())
	if err != nil {
		return nil, err
	}
	c.wake(j.Queue, j.RunAt)
	c.log.Info("job made due now", "job", id, "queue", j.Queue)
	return j, nil
}
