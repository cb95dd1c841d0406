package server

import (
	"context"

	"github.com/redrivehq/redrive/amqp"
)

// Brokers is what the API and the dashboard show of the RabbitMQ queues
// that `redrive serve --amqp-url` manages for consumers in any language.
type Brokers interface {
	// ManagedQueues returns every managed queue, in name order, with
	// the broker's depths asked now.
	ManagedQueues(ctx context.Context) []amqp.ManagedQueue
}
