package redrive

import "github.com/redrivehq/redrive/retry"

// RetryBudgetOf returns the retry budget's counts of e's queue.
func RetryBudgetOf(e *Executor, queue string) retry.BudgetStatus {
	return e.lane(queue).budget.Snapshot()
}
