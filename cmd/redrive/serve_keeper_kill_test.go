package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// deadKeys counts the dead jobs of store queue q by the key keyOf gives
// each, page by page.
func deadKeys(t *testing.T, s *redriveProc, q string, keyOf func(*testing.T, *redrive.Job) string) map[string]int {
	t.Helper()
	out := map[string]int{}
	cursor := ""
	for {
		code, body := s.api("GET", "/v1/dlq?limit=500&queue="+url.QueryEscape(q)+"&cursor="+url.QueryEscape(cursor), "")
		if code != 200 {
			t.Fatalf("GET /v1/dlq: %d %s", code, body)
		}
		var page struct {
			Jobs []*redrive.Job `json:"jobs"`
			Next string         `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			out[keyOf(t, j)]++
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// deadCount is how many dead jobs store queue q holds (GET /v1/dlq/count):
// what the waits below poll, rather than listing every dead letter (up to
// 2,000, in pages of 500, decoded by a -race test binary and encoded by a
// -race serve every 10 ms: most of the test's CPU). deadKeys, which tells
// each dead letter apart, runs once a wait is over.
func deadCount(t *testing.T, s *redriveProc, q string) int {
	t.Helper()
	code, body := s.api("GET", "/v1/dlq/count?queue="+url.QueryEscape(q), "")
	if code != 200 {
		t.Fatalf("GET /v1/dlq/count: %d %s", code, body)
	}
	var c struct {
		Count *int `json:"count"`
	}
	if err := json.Unmarshal(body, &c); err != nil || c.Count == nil {
		t.Fatalf("GET /v1/dlq/count: %s: %v", body, err)
	}
	return *c.Count
}

// throttled answers cond's last answer without asking it again until d
// has passed since it last asked: the waits tick every 10 ms, which for
// a count over HTTP from a -race serve, beside the keeper it waits for,
// is CPU taken from what is awaited.
func throttled(d time.Duration, cond func() bool) func() bool {
	var last time.Time
	var held bool
	return func() bool {
		if time.Since(last) >= d {
			last, held = time.Now(), cond()
		}
		return held
	}
}

func amqpMessageID(t *testing.T, j *redrive.Job) string { return payloadMessage(t, j).MessageID }

func kafkaRecordKey(t *testing.T, j *redrive.Job) string {
	t.Helper()
	var rec kafka.Record
	if err := json.Unmarshal(j.Payload, &rec); err != nil {
		t.Fatalf("job %d: payload %s: %v", j.ID, j.Payload, err)
	}
	return string(rec.Key)
}

// killWhileKeeping runs serve (args, env) until its store holds at least
// a fifth of the n dead letters of queue q and fewer than all, SIGKILLs
// it, starts it again on the same database, and checks that in the end
// the store holds each of the n dead letters exactly once.
func killWhileKeeping(t *testing.T, bin string, env, args []string, q string, n int, keyOf func(*testing.T, *redrive.Job) string) {
	t.Helper()
	s := startRedrive(t, bin, env, args...)
	s.token = "keeper-kill-token"
	within(t, 3*time.Minute, "a fifth of the dead letters in the store", func() bool {
		return deadCount(t, s, q) >= n/5
	})
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s2 := startRedrive(t, bin, env, args...)
	s2.token = "keeper-kill-token"
	// The first process's count, read from the restarted one before it
	// gets far: the kill must have come before the last dead letter.
	if at := deadCount(t, s2, q); at >= n {
		t.Logf("all %d dead letters were kept before the kill (fast machine): the kill tested nothing this time", n)
	} else {
		t.Logf("killed with about %d of %d dead letters in the store", at, n)
	}
	// A dead letter stored twice counts twice here: the count reaching n
	// with one missing fails below, as it must.
	within(t, 3*time.Minute, "every dead letter in the store", throttled(100*time.Millisecond, func() bool {
		return deadCount(t, s2, q) >= n
	}))
	got := deadKeys(t, s2, q, keyOf)
	twice := 0
	for k, c := range got {
		if c > 1 {
			if twice++; twice <= 5 {
				t.Errorf("%s is dead %d times in the store, want once", k, c)
			}
		}
	}
	if len(got) != n || twice > 0 {
		t.Errorf("%d distinct dead letters in the store (%d more than once), want %d once each", len(got), twice, n)
	}
}

// TestServeKilledWhileKeeping: serve is SIGKILLed while its keepers move
// dead letters from RabbitMQ (a managed queue's DLQ) and from Kafka (a
// DLT) into the store, and started again: none is lost, none stored
// twice.
func TestServeKilledWhileKeeping(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	t.Parallel()
	bin := buildRedrive(t)
	const n = 2000

	t.Run("rabbitmq", func(t *testing.T) {
		brokerURL := amqpTestURL(t)
		ctx := context.Background()
		conn, err := amqp.Dial(ctx, brokerURL, amqp.ConnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		q := fmt.Sprintf("keeper-kill-%d", time.Now().UnixNano())
		exchange := q + "-failures"
		t.Cleanup(func() { deleteManaged(conn, q, exchange) })
		args := []string{"--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0", "--amqp-queues", q,
			"--amqp-failure-exchange", exchange, "--retry-max-retries", "0", "--queues", "default"}
		env := []string{"REDRIVE_TOKEN=keeper-kill-token", "REDRIVE_AMQP_URL=" + brokerURL}

		// First, n dead letters in the DLQ: serve routes every message
		// a consumer rejects there (no retries), with its keeper off
		// (dead letters stay in the broker).
		router := startRedrive(t, bin, env, append(args[:len(args):len(args)], "--amqp-dead-letters", "broker")...)
		eventually(t, "serve declared the managed queue", func() bool { return queueExists(conn, q) })
		ch, err := conn.Channel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Qos(100, 0, false); err != nil {
			t.Fatal(err)
		}
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range deliveries {
				d.Reject(false)
			}
		}()
		pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		for i := range n {
			id := "dl-" + strconv.Itoa(i)
			if err := pub.Publish(ctx, "", q, amqp091.Publishing{MessageId: id, Body: []byte(id), DeliveryMode: amqp091.Persistent}); err != nil {
				t.Fatal(err)
			}
		}
		topo := amqp.NewTopology(q, mustPolicy(time.Second))
		within(t, 3*time.Minute, "every message in the DLQ", func() bool {
			c, err := conn.Channel(ctx)
			if err != nil {
				return false
			}
			defer c.Close()
			qi, err := c.QueueDeclarePassive(topo.DLQ(), true, false, false, false, nil)
			return err == nil && qi.Messages == n
		})
		ch.Close()
		router.stop()

		// Then serve keeps them in the store, and is killed meanwhile.
		killWhileKeeping(t, bin, env, append(args, "--amqp-dead-letters", "store"), q, n, amqpMessageID)
	})

	t.Run("kafka", func(t *testing.T) {
		brokers := kafkaCluster(t)
		topic := kafkaTopicName("keeper-kill")
		// n dead letters in the DLT: a consumer whose handler fails
		// every record for good.
		p := retry.Policy{MaxRetries: 1, Initial: 100 * time.Millisecond, Multiplier: 2, MaxDelay: 30 * time.Second, Jitter: retry.JitterNone}
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: topic + "-g",
			Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
			Executor: redrive.ExecutorOptions{Policy: &p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("doc", func(context.Context, *redrive.Job) error {
			return redrive.Permanent(errors.New("never"))
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer: %v", err)
			}
		})
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		waitKafkaTopics(t, brokers, topic)
		rs := make([]*kgo.Record, n)
		for i := range rs {
			if rs[i], err = kafka.NewRecord(topic, "doc", i, []byte("dl-"+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		within(t, 3*time.Minute, "every record in the DLT", func() bool { return dltCount(t, brokers, topic).Total == n })

		args := []string{"--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0", "--kafka-topics", topic,
			"--kafka-group", topic + "-g", "--retry-base", "100ms", "--retry-max-retries", "1", "--retry-jitter", "none",
			"--queues", "default"}
		env := []string{"REDRIVE_TOKEN=keeper-kill-token", "REDRIVE_KAFKA_BROKERS=" + strings.Join(brokers, ",")}
		killWhileKeeping(t, bin, env, args, topic, n, kafkaRecordKey)
	})
}
