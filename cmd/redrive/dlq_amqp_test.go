package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/amqp"
)

// amqpTestURL returns the broker of REDRIVE_AMQP_URL; the test skips
// without it, and fails without it in CI.
func amqpTestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(amqpURLEnv)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI: the RabbitMQ CLI tests must run there, not skip", amqpURLEnv)
		}
		t.Skipf("%s is not set: set it to a RabbitMQ URL to run the RabbitMQ CLI tests", amqpURLEnv)
	}
	return u
}

// TestAMQPDLQCommands drives `redrive dlq count|ls|redrive|purge
// --amqp-queue` against a real DLQ.
func TestAMQPDLQCommands(t *testing.T) {
	url := amqpTestURL(t)
	clearConnEnv(t)
	t.Setenv(amqpURLEnv, "")
	ctx := context.Background()
	conn, err := amqp.Dial(ctx, url, amqp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := fmt.Sprintf("redrive-cli-test-%d", time.Now().UnixNano())
	topo := amqp.Topology{Queue: q}
	ch, err := conn.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel(context.Background())
		if err != nil {
			return
		}
		ch.QueueDelete(q, false, false, false)
		ch.QueueDelete(topo.DLQ(), false, false, false)
		ch.Close()
	})
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		err := pub.Publish(ctx, "", topo.DLQ(), amqp091.Publishing{Type: "scan", MessageId: fmt.Sprint("m", i), Body: []byte("{}"),
			Headers: amqp091.Table{amqp.HeaderReason: "retries_exhausted", amqp.HeaderClass: "transient", amqp.HeaderError: "scanner down",
				amqp.HeaderAttempt: int64(4), amqp.HeaderOrigin: q}})
		if err != nil {
			t.Fatal(err)
		}
	}
	db := auditDB(t)
	flags := []string{"--amqp-url", url, "--amqp-queue", q, "--db", db}
	cli := func(args ...string) string { return mustCLI(t, append(args, flags...)...) }

	if out := strings.TrimSpace(cli("dlq", "count")); out != "5" {
		t.Errorf("dlq count = %q", out)
	}
	out := cli("dlq", "ls", "--limit", "2")
	if !strings.Contains(out, "m0") || !strings.Contains(out, "m1") || strings.Contains(out, "m2") ||
		!strings.Contains(out, "retries_exhausted") || !strings.Contains(out, "scanner down") || !strings.Contains(out, "first 2 of 5") {
		t.Errorf("dlq ls:\n%s", out)
	}
	dead := decode[[]amqp.DeadLetter](t, cli("--json", "dlq", "ls"))
	if len(dead) != 5 || dead[0].MessageID != "m0" || dead[4].MessageID != "m4" || dead[0].Attempts != 4 {
		t.Errorf("dlq ls --json: %+v", dead)
	}
	if out := cli("dlq", "redrive", "--max", "2", "--yes", "--note", "cli test"); !strings.Contains(out, "redriven 2 message(s)") {
		t.Errorf("dlq redrive --max 2: %q", out)
	}
	if out := strings.TrimSpace(cli("dlq", "count")); out != "3" {
		t.Errorf("count after redriving 2 = %q", out)
	}
	// The redrive is in the store's audit log, as the CLI's changes on
	// the store are.
	if es := auditEntries(t, db, "dlq redrive"); len(es) != 1 || es[0].Actor != localActor || es[0].Count != 2 ||
		es[0].Note != "cli test" || !strings.Contains(es[0].Target, `"amqp_queue":"`+topo.DLQ()+`"`) {
		t.Errorf("audit entries of the redrive: %+v", es)
	}
	// Without a store to record it in, the command refuses before it
	// touches the DLQ, unless --no-audit.
	noStore := []string{"--amqp-url", url, "--amqp-queue", q, "--db", filepath.Join(t.TempDir(), "none.db")}
	for _, args := range [][]string{{"dlq", "redrive", "--max", "1", "--yes"}, {"dlq", "purge", "--all", "--yes"}} {
		_, _, err := runCLIIn(t, "", append(args, noStore...)...)
		if err == nil || !strings.Contains(err.Error(), "audit log") || !strings.Contains(err.Error(), "--no-audit") {
			t.Errorf("%s without a store: %v", strings.Join(args, " "), err)
		}
	}
	if out := strings.TrimSpace(cli("dlq", "count")); out != "3" {
		t.Errorf("count after the refusals = %q", out)
	}
	stdout, stderr, err := runCLIIn(t, "", append([]string{"dlq", "redrive", "--max", "1", "--yes", "--no-audit"}, noStore...)...)
	if err != nil || !strings.Contains(stdout, "redriven 1 message(s)") || !strings.Contains(stderr, "not recorded in the audit log") {
		t.Errorf("redrive --no-audit: %v %q %q", err, stdout, stderr)
	}
	if _, _, err := runCLIIn(t, "", "dlq", "redrive", "--all", "--yes", "--no-audit", "--db", db); err == nil || !strings.Contains(err.Error(), "applies to a broker's DLQ") {
		t.Errorf("--no-audit on the store's redrive: %v", err)
	}
	// Refusals: what does not apply to a RabbitMQ DLQ, a purge without
	// --all, a redrive without a count, and no terminal to confirm.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "ls", "--queue", "x"}, "--queue applies to the store's dead jobs"},
		{[]string{"dlq", "purge"}, "pass --all"},
		{[]string{"dlq", "redrive"}, "--max N"},
		{[]string{"dlq", "redrive", "5"}, "no job ids"},
		{[]string{"dlq", "purge", "--all"}, "pass --yes"},
	} {
		_, stderr, err := runCLIIn(t, "", append(c.args, flags...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("redrive %s: %v %s; want %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
	if _, _, err := runCLI(t, "dlq", "count", "--amqp-url", url); err == nil || !strings.Contains(err.Error(), "needs --amqp-queue") {
		t.Errorf("--amqp-url without --amqp-queue: %v", err)
	}
	if out := cli("dlq", "purge", "--all", "--yes"); !strings.Contains(out, "purged 2") {
		t.Errorf("dlq purge: %q", out)
	}
	if es := auditEntries(t, db, "dlq purge"); len(es) != 1 || es[0].Actor != localActor || es[0].Count != 2 {
		t.Errorf("audit entries of the purge: %+v", es)
	}
	if n, _ := (func() (int, error) { d, _ := amqp.NewDLQ(conn, q); defer d.Close(); return d.Count(ctx) })(); n != 0 {
		t.Errorf("%d left after the purge", n)
	}
	if out := strings.TrimSpace(cli("dlq", "redrive", "--all", "--yes")); !strings.Contains(out, "nothing to redrive") {
		t.Errorf("redrive of an empty DLQ: %q", out)
	}
}
