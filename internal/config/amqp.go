package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/amqp"
)

// AMQP is what `serve --amqp-url` manages on RabbitMQ.
type AMQP struct {
	// URL is the broker's URL; empty: no broker.
	URL string
	// Queues are the managed work queues, each with the concurrency of
	// the store worker that publishes its redriven dead letters back.
	Queues map[string]int
	// DeadLetters is "store" (the keeper moves them into the store) or
	// "broker" (they stay in <queue>-dlq).
	DeadLetters string
	// FailureExchange is the exchange consumers report failures to.
	FailureExchange string
	// Quorum declares quorum queues.
	Quorum bool

	spec string // the raw queues setting
}

// amqpSettings are the settings of the managed RabbitMQ queues.
var amqpSettings = []setting{
	{name: "amqp-url", help: "RabbitMQ URL (amqp:// or amqps://) of the queues --amqp-queues manages (prefer $REDRIVE_AMQP_URL: flags show in ps)", apply: func(c *Serve, v string) error {
		if v != "" {
			if _, err := amqp091.ParseURI(v); err != nil {
				// The parser's error quotes the URL, password included.
				return fmt.Errorf("not an AMQP URL (%s): %s", amqp.Redact(v), strings.ReplaceAll(err.Error(), v, amqp.Redact(v)))
			}
		}
		c.AMQP.URL = v
		return nil
	}},
	{name: "amqp-queues", help: `RabbitMQ work queues to manage for consumers in any language, e.g. "orders,scans" (each queue's retry policy is the one of the store queue of the same name; =N sets the concurrency of publishing its redriven dead letters back)`, apply: func(c *Serve, v string) error {
		if strings.TrimSpace(v) == "" {
			c.AMQP.spec = ""
			return nil
		}
		qs, err := parseQueues(v, 1)
		if err != nil {
			return err
		}
		for q := range qs {
			if err := (amqp.Topology{Queue: q}).Validate(); err != nil {
				return err
			}
		}
		c.AMQP.spec = v
		return nil
	}},
	{name: "amqp-dead-letters", def: "store", help: `where dead letters of managed queues are kept: "store" (as dead jobs, so the DLQ tools and the dashboard manage them) or "broker" (left in <queue>-dlq)`, apply: func(c *Serve, v string) error {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "store":
			c.AMQP.DeadLetters = "store"
		case "broker":
			c.AMQP.DeadLetters = "broker"
		default:
			return fmt.Errorf("%q: want store or broker", v)
		}
		return nil
	}},
	{name: "amqp-failure-exchange", def: amqp.DefaultFailureExchange, help: "the exchange consumers publish failure reports to (declared by serve)", apply: func(c *Serve, v string) error {
		if strings.TrimSpace(v) == "" {
			return errors.New("empty exchange name")
		}
		if err := (amqp.Topology{Queue: "q", FailureExchange: v}).Validate(); err != nil {
			return err
		}
		c.AMQP.FailureExchange = v
		return nil
	}},
	{name: "amqp-quorum", def: "false", bool: true, help: "declare the managed queues as quorum queues (RabbitMQ 3.10 or later)", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.AMQP.Quorum = b
		return err
	}},
}

// resolveAMQP checks the managed queues' settings together and adds each
// managed queue to the store queues served (its dead letters live there,
// and its policy is theirs), keeping a concurrency given by --queues.
func resolveAMQP(c *Serve) error {
	if c.AMQP.spec == "" {
		return nil
	}
	if c.AMQP.URL == "" {
		return errors.New("amqp-queues: managing RabbitMQ queues needs --amqp-url (or $REDRIVE_AMQP_URL)")
	}
	qs, err := parseQueues(c.AMQP.spec, c.Workers)
	if err != nil {
		return fmt.Errorf("amqp-queues: %w", err)
	}
	c.AMQP.Queues = qs
	for q, n := range qs {
		if _, ok := c.Queues[q]; !ok {
			c.Queues[q] = n
		}
	}
	return nil
}

// ManagedNames returns the managed queues' names, sorted.
func (a *AMQP) ManagedNames() []string {
	names := make([]string, 0, len(a.Queues))
	for q := range a.Queues {
		names = append(names, q)
	}
	sort.Strings(names)
	return names
}
