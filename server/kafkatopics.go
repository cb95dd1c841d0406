package server

import (
	"context"
	"net/http"

	"github.com/redrivehq/redrive/kafka"
)

// KafkaTopics is what the API and the dashboard show of the Kafka topics
// whose dead letters `redrive serve --kafka-topics` keeps in the store.
type KafkaTopics interface {
	// KafkaTopics returns every kept topic, in name order, with the
	// cluster's statistics asked now.
	KafkaTopics(ctx context.Context) []kafka.ManagedTopic
}

// KafkaTopicList is the body of GET /v1/kafka/topics: the Kafka main
// topics whose dead-letter topics `redrive serve --kafka-topics` keeps in
// the store, in name order; an empty list when it keeps none.
type KafkaTopicList struct {
	Topics []kafka.ManagedTopic `json:"topics"`
}

func (a *api) listKafkaTopics(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	out := KafkaTopicList{Topics: []kafka.ManagedTopic{}}
	if a.kafka != nil {
		// The same bound as the RabbitMQ queues': a cluster that does not
		// answer in time is reported in each topic's error.
		ctx, cancel := context.WithTimeout(r.Context(), managedQueuesTimeout)
		defer cancel()
		for _, t := range a.kafka.KafkaTopics(ctx) {
			if t.Tiers == nil {
				t.Tiers = []kafka.TierCount{}
			}
			if t.Brokers == nil {
				t.Brokers = []string{}
			}
			out.Topics = append(out.Topics, t)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
