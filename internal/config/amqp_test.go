package config

import (
	"strings"
	"testing"
	"time"
)

// TestServeAMQPConfig: managed queues from flags, the environment and
// the config file, each with the policy of the store queue of its name.
func TestServeAMQPConfig(t *testing.T) {
	c, err := loadConfig(t, map[string]string{"REDRIVE_AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"},
		"--amqp-queues", "scans,orders=3", "--queues", "default,orders=7")
	if err != nil {
		t.Fatal(err)
	}
	if c.AMQP.URL == "" || c.AMQP.DeadLetters != "store" || c.AMQP.FailureExchange != "redrive.failures" || c.AMQP.Quorum {
		t.Errorf("defaults: %+v", c.AMQP)
	}
	if got := strings.Join(c.AMQP.ManagedNames(), ","); got != "orders,scans" {
		t.Errorf("managed %s", got)
	}
	// Managed queues are served by the store's worker too (their dead
	// letters live there); --queues' concurrency wins.
	if c.Queues["scans"] != c.Workers || c.Queues["orders"] != 7 || c.Queues["default"] != c.Workers {
		t.Errorf("served queues %v", c.Queues)
	}

	file := writeFile(t, "redrive.json", `{"amqp-url": "amqp://h/", "amqp-dead-letters": "broker", "amqp-quorum": true,
		"amqp-queues": {"scans": {"retry": {"base": "2s", "max-retries": 5}}, "orders": 2}}`)
	c, err = loadConfig(t, nil, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.QueueRetry["scans"]; !ok || p.Initial != 2*time.Second || p.MaxRetries != 5 {
		t.Errorf("scans' policy %+v (set %v), want base 2s, 5 retries", p, ok)
	}
	if _, ok := c.QueueRetry["orders"]; ok {
		t.Errorf("orders has a policy of its own; want the default")
	}
	if c.AMQP.DeadLetters != "broker" || !c.AMQP.Quorum || c.Queues["orders"] != 2 {
		t.Errorf("from the file: %+v, queues %v", c.AMQP, c.Queues)
	}
}

func TestServeAMQPConfigErrors(t *testing.T) {
	twice := writeFile(t, "twice.json", `{"amqp-url": "amqp://h/", "queues": {"scans": {"retry": {"base": "1s"}}},
		"amqp-queues": {"scans": {"retry": {"base": "2s"}}}}`)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--amqp-queues", "scans"}, want: "amqp-queues: managing RabbitMQ queues needs --amqp-url"},
		{args: []string{"--amqp-url", "http://h/"}, want: "--amqp-url: not an AMQP URL"},
		{args: []string{"--amqp-url", "amqp://u:secret@h:notaport/"}, want: "--amqp-url: not an AMQP URL"},
		{args: []string{"--amqp-queues", "amq.orders"}, want: "the amq. prefix is reserved"},
		{args: []string{"--amqp-queues", "a,a"}, want: `queue "a" is listed twice`},
		{env: map[string]string{"REDRIVE_AMQP_DEAD_LETTERS": "disk"}, want: `REDRIVE_AMQP_DEAD_LETTERS: "disk": want store or broker`},
		{args: []string{"--amqp-failure-exchange", "amq.direct"}, want: "--amqp-failure-exchange: amqp: topology: failure exchange"},
		{env: map[string]string{"REDRIVE_AMQP_QUORUM": "perhaps"}, want: `REDRIVE_AMQP_QUORUM: "perhaps": not a boolean`},
		{args: []string{"--config", twice}, want: `queue "scans": its retry policy is given twice`},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.env, tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}
