package amqp

// ManagedQueue is the state of one managed RabbitMQ work queue, as
// redrive serve shows it: where its messages are, and what its router
// and dead-letter keeper did.
type ManagedQueue struct {
	// Queue is the work queue's name; Broker, the broker's URL without
	// credentials.
	Queue  string `json:"queue"`
	Broker string `json:"broker"`
	// FailureExchange is where consumers report failures.
	FailureExchange string `json:"failure_exchange"`
	// DeadLetters says where dead letters are kept: "store" (as dead
	// jobs of the store queue of the same name) or "broker" (in
	// <queue>-dlq).
	DeadLetters string `json:"dead_letters"`
	// Queues are the broker's depth and consumers of each queue of the
	// topology: the work queue, the failure queue, the delay queues and
	// the DLQ.
	Queues []QueueDepth `json:"queues"`
	// Router and Keeper are the running totals since serve started
	// (Keeper is absent when dead letters stay in the broker).
	Router RouterStats  `json:"router"`
	Keeper *KeeperStats `json:"keeper,omitempty"`
	// Error is set when the broker could not be asked for the depths.
	Error string `json:"error,omitempty"`
}
