package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/kafka"
)

// TestAMQPDLQSealedBodies: `dlq ls --amqp-queue` shows a sealed dead
// letter's body opened with the payload keys of the environment, and as
// undecryptable (the envelope, never a plaintext byte) without them; a
// `dlq redrive --amqp-queue` publishes it back sealed, byte for byte.
func TestAMQPDLQSealedBodies(t *testing.T) {
	url := amqpTestURL(t)
	clearConnEnv(t)
	t.Setenv(amqpURLEnv, "")
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "")
	ctx := context.Background()
	conn, err := amqp.Dial(ctx, url, amqp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := fmt.Sprintf("redrive-cli-sealed-%d", time.Now().UnixNano())
	topo := amqp.Topology{Queue: q}
	if err := topo.DeclareConn(ctx, conn); err != nil {
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
	keyList := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	keys, err := redrive.ParsePayloadKeys([]byte(keyList))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"token":"tok-4111111111111111"}`)
	sealed, err := keys.Seal(q, plain)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(ctx, "", topo.DLQ(), amqp091.Publishing{Type: "sec", MessageId: "s1", Body: sealed,
		Headers: amqp091.Table{amqp.HeaderReason: "permanent", amqp.HeaderClass: "permanent", amqp.HeaderError: "no",
			amqp.HeaderAttempt: int64(1), amqp.HeaderOrigin: q, redrive.HeaderSealed: "k1"}}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--amqp-url", url, "--amqp-queue", q, "--db", auditDB(t)}
	ls := func() amqp.DeadLetter {
		t.Helper()
		var dead []amqp.DeadLetter
		if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"dlq", "ls", "--json"}, flags...)...)), &dead); err != nil || len(dead) != 1 {
			t.Fatalf("dlq ls --json: %v %v", err, dead)
		}
		return dead[0]
	}

	d := ls()
	if !bytes.Equal(d.Body, sealed) || d.Sealed != "k1" || !strings.HasPrefix(d.BodyError, "undecryptable: ") {
		t.Errorf("without keys: body %q sealed %q error %q", d.Body, d.Sealed, d.BodyError)
	}
	if out := mustCLI(t, append([]string{"dlq", "ls"}, flags...)...); !strings.Contains(out, "undecryptable") || strings.Contains(out, "tok-") {
		t.Errorf("dlq ls without keys:\n%s", out)
	}
	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyList)
	if d := ls(); !bytes.Equal(d.Body, plain) || d.Sealed != "k1" || d.BodyError != "" {
		t.Errorf("with keys: body %q sealed %q error %q", d.Body, d.Sealed, d.BodyError)
	}

	mustCLI(t, append([]string{"dlq", "redrive", "--all", "--yes"}, flags...)...)
	ch, err := conn.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	got, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("the redriven message: %v %v", ok, err)
	}
	if !bytes.Equal(got.Body, sealed) || got.Headers[redrive.HeaderSealed] != "k1" {
		t.Errorf("redriven: body %q headers %v, want the envelope as it was, marked", got.Body, got.Headers)
	}
}

// TestKafkaDLQSealedValues: `dlq ls --kafka-topic` shows a sealed dead
// letter's value opened with the payload keys of the environment, and as
// undecryptable (the envelope) without them.
func TestKafkaDLQSealedValues(t *testing.T) {
	clearConnEnv(t)
	t.Setenv("REDRIVE_PAYLOAD_KEYS_FILE", "")
	t.Setenv("REDRIVE_PAYLOAD_KEYS", "")
	brokers := kafkaCluster(t)
	topic := kafkaTopicName("sealed")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	dlt := kafka.Topology{Topic: topic}.DLT()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, -1, nil, topic, dlt); err != nil {
		t.Fatal(err)
	}
	keyList := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	keys, err := redrive.ParsePayloadKeys([]byte(keyList))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"token":"tok-4111111111111111"}`)
	sealed, err := keys.Seal(topic, plain)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cl.ProduceSync(pctx, &kgo.Record{Topic: dlt, Key: []byte("s1"), Value: sealed, Headers: []kgo.RecordHeader{
		{Key: kafka.HeaderKind, Value: []byte("sec")}, {Key: kafka.HeaderReason, Value: []byte("permanent")},
		{Key: kafka.HeaderAttempt, Value: []byte("1")}, {Key: redrive.HeaderSealed, Value: []byte("k1")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--kafka-brokers", strings.Join(brokers, ","), "--kafka-topic", topic, "--db", auditDB(t)}
	ls := func() kafka.DeadLetter {
		t.Helper()
		dead := decode[[]kafka.DeadLetter](t, mustCLI(t, append([]string{"--json", "dlq", "ls"}, flags...)...))
		if len(dead) != 1 {
			t.Fatalf("dlq ls: %v", dead)
		}
		return dead[0]
	}
	if d := ls(); !bytes.Equal(d.Value, sealed) || d.Sealed != "k1" || !strings.HasPrefix(d.ValueError, "undecryptable: ") {
		t.Errorf("without keys: value %q sealed %q error %q", d.Value, d.Sealed, d.ValueError)
	}
	if out := mustCLI(t, append([]string{"dlq", "ls"}, flags...)...); !strings.Contains(out, "undecryptable") || strings.Contains(out, "tok-") {
		t.Errorf("dlq ls without keys:\n%s", out)
	}
	t.Setenv("REDRIVE_PAYLOAD_KEYS", keyList)
	if d := ls(); !bytes.Equal(d.Value, plain) || d.Sealed != "k1" || d.ValueError != "" {
		t.Errorf("with keys: value %q sealed %q error %q", d.Value, d.Sealed, d.ValueError)
	}
}
