package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
)

// benchPartition returns a partition of a consumer whose kind
// "bench.noop" runs fn, on a kgo group client of an in-process kfake
// cluster that never polls (so it never joins: marks cost what they cost
// a member, without a commit), and records of that kind to feed it.
func benchPartition(b testing.TB, fn redrive.Handler) (*partition, []*kgo.Record) {
	return benchPartitionOf(b, fn, []byte(`{"n":1}`), nil)
}

// benchPartitionOf is benchPartition with records of value, sealed (and
// opened by the consumer) when bodies is set.
func benchPartitionOf(b testing.TB, fn redrive.Handler, value []byte, bodies *redrive.SealedBodies) (*partition, []*kgo.Record) {
	b.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(fake.Close)
	const topic = "bench"
	c, err := NewConsumer(ConsumerOptions{Brokers: fake.ListenAddrs(), Group: "bench-g",
		Topics: map[string]TopicOptions{topic: {Partitions: 1}}, Bodies: bodies,
		Executor: redrive.ExecutorOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		b.Fatal(err)
	}
	c.HandleFunc("bench.noop", fn)
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ConsumerGroup("bench-g"), kgo.ConsumeTopics(topic),
		kgo.AutoCommitMarks())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	rs := make([]*kgo.Record, 1024)
	now := time.Now()
	for i := range rs {
		r, err := NewRecord(topic, "bench.noop", value, nil)
		if err == nil {
			err = SealRecord(r, bodies)
		}
		if err != nil {
			b.Fatal(err)
		}
		r.Offset, r.Timestamp = int64(i), now
		rs[i] = r
	}
	return newPartition(c, cl, c.topics[topic], topic, 0), rs
}

// BenchmarkRecordHandle is the per-record cost of a main topic's record
// with a no-op handler, from a partition's queue head to its offset
// marked: decoding its headers, the job, the attempt, the outcome and the
// mark.
func BenchmarkRecordHandle(b *testing.B) {
	p, rs := benchPartition(b, func(context.Context, *redrive.Job) error { return nil })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if !p.handle(rs[i%len(rs)]) {
			b.Fatal("not settled")
		}
	}
}

// BenchmarkPartitionRun is the per-record cost of a partition's goroutine
// fed as the poll loop feeds it (pushes of 500 records, the default
// read-ahead), with a no-op handler: queueing, waking, handling, marking.
func BenchmarkPartitionRun(b *testing.B) {
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	p, rs := benchPartition(b, func(context.Context, *redrive.Job) error {
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	})
	b.ReportAllocs()
	b.ResetTimer()
	go p.run()
	for pushed := 0; pushed < b.N; {
		k := min(500, b.N-pushed)
		batch := make([]*kgo.Record, k)
		for i := range batch {
			batch[i] = rs[(pushed+i)%len(rs)]
		}
		// As the poll loop, which polls again once the partition has
		// room: wait for the queue to drain to half, as push does
		// (the partition's goroutine signals room).
		p.mu.Lock()
		full := !p.halfLocked()
		p.roomWanted = full
		p.mu.Unlock()
		if full {
			<-p.room
		}
		p.push(context.Background(), batch)
		pushed += k
	}
	<-done
	b.StopTimer()
	p.stop()
	<-p.done
}

// BenchmarkConsumeKfake is a Consumer's no-op consumption of b.N records
// waiting in a 4-partition topic of an in-process kfake cluster, from its
// start (the group join included).
func BenchmarkConsumeKfake(b *testing.B) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer fake.Close()
	const topic = "bench"
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, b.N)
	for i := range rs {
		rs[i], _ = NewRecord(topic, "bench.noop", []byte(`{"n":1}`), nil)
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	c, err := NewConsumer(ConsumerOptions{Brokers: fake.ListenAddrs(), Group: "bench-g",
		Topics:   map[string]TopicOptions{topic: {Partitions: 4}},
		Executor: redrive.ExecutorOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	c.HandleFunc("bench.noop", func(context.Context, *redrive.Job) error {
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	})
	b.ReportAllocs()
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	<-done
	b.StopTimer()
	cancel()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRecordHandleSealed is BenchmarkRecordHandle with a 1 KiB JSON
// value, in clear ("off") and sealed ("on": the consumer opens it), in
// the same run: the consumer's cost of sealed values per record.
func BenchmarkRecordHandleSealed(b *testing.B) {
	value := []byte(`{"token":"tok-4111111111111111","blob":"` + strings.Repeat("x", 1000) + `"}`)
	keys, err := redrive.ParsePayloadKeys([]byte("k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var bodies *redrive.SealedBodies
			if mode == "on" {
				bodies = &redrive.SealedBodies{Keys: keys, All: true}
			}
			p, rs := benchPartitionOf(b, func(_ context.Context, j *redrive.Job) error {
				if len(j.Payload) != len(value) {
					b.Errorf("payload %d bytes", len(j.Payload))
				}
				return nil
			}, value, bodies)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if !p.handle(rs[i%len(rs)]) {
					b.Fatal("not settled")
				}
			}
		})
	}
}
