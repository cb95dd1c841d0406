package main

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/bench"
)

// TestAMQPBench runs `redrive bench amqp` on a small N against the broker
// of REDRIVE_AMQP_URL: the redrive phases and, beside them, the raw
// amqp091-go phases with their exact counts and the redrive/raw ratios.
func TestAMQPBench(t *testing.T) {
	url := amqpTestURL(t)
	out := mustCLI(t, "bench", "amqp", "-n", "200", "--workers", "10", "--amqp-url", url)
	for _, want := range []string{"amqp  (go", "RabbitMQ ", "raw client            amqp091-go alone, on a durable classic queue",
		"confirmed publish                           200 in", "completed 400, retried 200, dead 0",
		"raw amqp091 confirmed publish               200 in", "raw amqp091 consume, no-op                  200 in",
		"(queued 200, acked 200, left 0, returned 0)", "redrive/raw                                 publish "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench amqp: no %q in\n%s", want, out)
		}
	}

	r := decode[bench.AMQPResult](t, mustCLI(t, "--json", "bench", "amqp", "-n", "150", "--batch", "40", "--publishers", "3",
		"--workers", "5", "--quorum", "--amqp-url", url))
	if r.Workload != "amqp" || r.Params.N != 150 || r.Params.Batch != 40 || r.Params.Publishers != 3 || !r.Params.Quorum {
		t.Errorf("meta %+v, params %+v", r.Meta, r.Params)
	}
	if r.Stats.Completed != 300 || r.Stats.Retried != 150 || r.Stats.Dead != 0 || r.Router.Retried != 150 {
		t.Errorf("redrive phases: consumer %+v, router %+v", r.Stats, r.Router)
	}
	if r.Raw.Queued != 150 || r.Raw.Consumed != 150 || r.Raw.Left != 0 || r.Raw.Returned != 0 {
		t.Errorf("raw counts: %+v", r.Raw)
	}
	if r.Raw.PublishRate <= 0 || r.Raw.ConsumeRate <= 0 || r.Raw.Publish <= 0 || r.Raw.Consume <= 0 {
		t.Errorf("raw figures: %+v", r.Raw)
	}
	if want := (bench.AMQPRatios{Publish: r.PublishRate / r.Raw.PublishRate, Consume: r.ConsumeRate / r.Raw.ConsumeRate}); r.Ratios != want {
		t.Errorf("ratios %+v, want %+v", r.Ratios, want)
	}
}
