package server

import (
	"context"
	"net/http"
	"time"

	"github.com/redrivehq/redrive/amqp"
)

// ManagedQueueList is the body of GET /v1/amqp/queues: the RabbitMQ
// queues `redrive serve --amqp-url` manages, in name order; an empty list
// when it manages none.
type ManagedQueueList struct {
	Queues []amqp.ManagedQueue `json:"queues"`
}

// managedQueuesTimeout bounds how long GET /v1/amqp/queues waits for the
// broker's depths; a broker that does not answer in time is reported in
// each queue's error.
const managedQueuesTimeout = 10 * time.Second

func (a *api) listManagedQueues(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	out := ManagedQueueList{Queues: []amqp.ManagedQueue{}}
	if a.brokers != nil {
		ctx, cancel := context.WithTimeout(r.Context(), managedQueuesTimeout)
		defer cancel()
		for _, q := range a.brokers.ManagedQueues(ctx) {
			if q.Queues == nil {
				q.Queues = []amqp.QueueDepth{}
			}
			out.Queues = append(out.Queues, q)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
