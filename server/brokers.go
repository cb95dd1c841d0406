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

// BrokerHealth is implemented by Brokers that know whether serve is
// connected to the broker now; /readyz reports it.
type BrokerHealth interface {
	// Connections returns the state of each broker connection.
	Connections() []amqp.ConnState
}

// readyBroker is a broker connection as /readyz shows it, to anyone:
// whether it is up and how often it came back, but not where it is nor
// its errors (GET /v1/amqp/queues, behind the token, has those).
type readyBroker struct {
	Kind       string `json:"kind"`
	Connected  bool   `json:"connected"`
	Reconnects int64  `json:"reconnects"`
}
