package redrive

import "github.com/redrivehq/redrive/retry"

// RetryBudgetOf returns the retry budget's counts of e's queue.
func RetryBudgetOf(e *Executor, queue string) retry.BudgetStatus {
	return e.lane(queue).budget.Snapshot()
}

// RemoteWatched returns how many queues r keeps wake-up hooks and
// long-poll waiters for.
func RemoteWatched(r *RemoteWorkers) (hooked, waited int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hooked), len(r.waiters)
}

// RemoteWaiting returns how many long-polls wait on queue.
func RemoteWaiting(r *RemoteWorkers, queue string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiters[queue])
}
