package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/kafka"
)

// kafkaFetchMaxWait is kafka.Consumer's default kgo.FetchMaxWait, which
// the raw consumers take too unless KafkaParams.FetchMaxWait is set.
const kafkaFetchMaxWait = 100 * time.Millisecond

// KafkaRaw is what the raw-client phases of the Kafka workload measured:
// franz-go's kgo client used directly, no redrive code, with the settings
// of the redrive phase each one is compared with, on topics of its own
// with the same partitions.
type KafkaRaw struct {
	// Produce is the time N asynchronous produces took to be acknowledged
	// from a client set up as the redrive produce phase's (acks from every
	// in-sync replica, idempotent, 10ms linger, round-robin); the values
	// are the same JSON payloads, without redrive's kind header.
	// ProduceRate is N over it.
	Produce     Duration `json:"produce_ms"`
	ProduceRate float64  `json:"produce_per_s"`
	// Consume is the time a kgo group consumer set up as kafka.Consumer
	// sets up its client (offsets committed once marked, every second;
	// rebalances held during a poll's records; the same fetch max wait)
	// took, from its creation, to handle N waiting records with a no-op,
	// each marked; ConsumeRate is N over it. ConsumeFirst is when the
	// first was handled; ConsumeAfterFirstRate is the N-1 others over the
	// time after it.
	Consume               Duration `json:"consume_ms"`
	ConsumeRate           float64  `json:"consume_per_s"`
	ConsumeFirst          Duration `json:"consume_first_ms"`
	ConsumeAfterFirstRate float64  `json:"consume_after_first_per_s"`
	// RetryPath is the time such a consumer of a main topic and a retry
	// topic took, from its creation, until N records waiting in the main
	// topic had each been produced to the retry topic (acks from every
	// in-sync replica, awaited, as kafka.Consumer awaits a retry) before
	// its offset was marked, then consumed from the retry topic (a no-op,
	// marked): redrive's fail-once path without redrive's decisions.
	// RetryPathRate is N over it; RetryPathFirst is when the first retry
	// record was handled.
	RetryPath      Duration `json:"retry_path_ms"`
	RetryPathRate  float64  `json:"retry_path_per_s"`
	RetryPathFirst Duration `json:"retry_path_first_ms"`
	// Consumed counts the records the no-op phase handled; RetryMain and
	// RetryTier those the retry path handled from the main topic and from
	// the retry topic. Each must be exactly N.
	Consumed  int64 `json:"consumed"`
	RetryMain int64 `json:"retry_main"`
	RetryTier int64 `json:"retry_tier"`
}

// KafkaRatios are redrive's rates over the raw client's, in the same run
// (1: as fast; the documented goal is at least 0.8).
type KafkaRatios struct {
	Produce           float64 `json:"produce"`
	Consume           float64 `json:"consume"`
	ConsumeAfterFirst float64 `json:"consume_after_first"`
	RetryPath         float64 `json:"retry_path"`
}

// KafkaLateness is what the Kafka workload's lateness phase measured: a
// kafka.Consumer running M waiting records whose first attempt fails and
// is retried once after the delay, through the tier of that delay.
type KafkaLateness struct {
	// SinceFailure is, on each record's second attempt, the time its
	// handler started minus (the time the first attempt's handler
	// returned its error + the retry delay): it includes the consumer's
	// produce to the tier, the tier's fetch and its wait for the due time.
	SinceFailure Percentiles `json:"since_failure"`
	// VsDue is, on each second attempt, the time its handler started
	// minus the due time the record carried.
	VsDue Percentiles `json:"vs_due"`
	// Elapsed is the phase's time, from the consumer's start to the last
	// second attempt's success.
	Elapsed Duration `json:"elapsed_ms"`
	// Stats are the lateness consumer's totals.
	Stats kafka.Stats `json:"consumer"`
}

// ratio is a over b, 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// produceAll produces rs asynchronously on cl and returns once every one
// was acknowledged, with the time that took and the first error.
func produceAll(ctx context.Context, cl *kgo.Client, rs []*kgo.Record) (time.Duration, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for _, r := range rs {
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("bench: kafka: produce to %s: %w", r.Topic, err)
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// topicsReady waits until every topic of names has partitions partitions,
// each with a leader, for up to 30 seconds.
func topicsReady(ctx context.Context, adm *kadm.Client, names []string, partitions int32) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing []string
		listed, err := adm.ListTopics(ctx, names...)
		for _, name := range names {
			if err != nil || !topicReady(listed[name], partitions) {
				missing = append(missing, name)
			}
		}
		switch {
		case len(missing) == 0:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			if err == nil {
				err = errors.New("no leader on some partitions")
			}
			return fmt.Errorf("bench: kafka: topics %s not ready after 30s: %w", strings.Join(missing, ", "), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// topicReady reports whether a listed topic has partitions partitions,
// each with a leader.
func topicReady(d kadm.TopicDetail, partitions int32) bool {
	if d.Err != nil || int32(len(d.Partitions)) != partitions {
		return false
	}
	for _, pd := range d.Partitions {
		if pd.Err != nil || pd.Leader < 0 {
			return false
		}
	}
	return true
}

// rawRecords returns n plain records of topic: the JSON payloads of the
// redrive phases' records, without headers.
func rawRecords(topic string, n int) ([]*kgo.Record, error) {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		v, err := json.Marshal(noopArgs{N: i})
		if err != nil {
			return nil, fmt.Errorf("bench: kafka: %w", err)
		}
		rs[i] = &kgo.Record{Topic: topic, Value: v}
	}
	return rs, nil
}

// rawKafkaGroup returns a plain kgo group consumer of topics, set up as
// kafka.Consumer sets up its client in its default mode: offsets
// committed once marked, every second; rebalances held while a poll's
// records are handled; what it produces acknowledged by every in-sync
// replica, without linger; a fetch max wait of 100ms; records of open or
// aborted transactions skipped (read_committed, as kafka.Consumer reads).
// opts come last (the workload's fetch max wait, when given).
func rawKafkaGroup(brokers []string, group string, topics []string, logger *slog.Logger, opts []kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...), kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second), kgo.BlockRebalanceOnPoll(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.FetchMaxWait(kafkaFetchMaxWait),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.WithLogger(benchKgoLogger{logger})}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: kafka: raw consumer: %w", err)
	}
	return cl, nil
}

// rawKafkaRun polls cl until done reports true. The records of each poll
// are handled partition by partition, one goroutine per partition and in
// order within it (kafka.Consumer too runs a partition's records in
// order, partitions at once); a record is marked for commit once handle
// returned nil. The first error of handle stops the run. At the end the
// marked offsets are committed and cl is closed.
func rawKafkaRun(ctx context.Context, cl *kgo.Client, logger *slog.Logger, handle func(*kgo.Record) error, done func() bool) error {
	defer cl.CloseAllowingRebalance()
	for !done() {
		pctx, cancel := context.WithTimeout(ctx, DefaultStallTimeout)
		fetches := cl.PollRecords(pctx, 1000)
		stalled := pctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case stalled:
			return fmt.Errorf("bench: kafka: raw consumer: no record for %s", DefaultStallTimeout)
		case fetches.IsClientClosed():
			return errors.New("bench: kafka: raw consumer: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			logger.Warn("bench: kafka: raw consumer: fetch error", "topic", t, "partition", p, "error", err)
		})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			wg.Go(func() {
				for _, r := range fp.Records {
					if err := handle(r); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						return
					}
					cl.MarkCommitRecords(r)
				}
			})
		})
		wg.Wait()
		cl.AllowRebalance()
		if firstErr != nil {
			return firstErr
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		return fmt.Errorf("bench: kafka: raw consumer: commit: %w", err)
	}
	return nil
}

// stamps records when the first and the n-th of n events happened.
type stamps struct {
	n          int64
	count      atomic.Int64
	first, nth atomic.Int64 // Unix nanoseconds
	start      time.Time
}

func newStamps(n int) *stamps { return &stamps{n: int64(n), start: time.Now()} }

// add counts one event.
func (s *stamps) add() {
	now := time.Now().UnixNano()
	k := s.count.Add(1)
	if k == 1 {
		s.first.Store(now)
	}
	if k == s.n {
		s.nth.Store(now)
	}
}

// done reports whether the n-th event happened.
func (s *stamps) done() bool { return s.nth.Load() != 0 }

// times returns when the first and the n-th event happened since start.
func (s *stamps) times() (first, last time.Duration) {
	at := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(s.start) }
	return at(s.first.Load()), at(s.nth.Load())
}

// rawKafkaConsume runs the raw no-op phase on topic: n waiting records.
func rawKafkaConsume(ctx context.Context, brokers []string, topic string, n int, logger *slog.Logger, opts []kgo.Opt, raw *KafkaRaw) error {
	st := newStamps(n)
	cl, err := rawKafkaGroup(brokers, topic+"-group", []string{topic}, logger, opts)
	if err != nil {
		return err
	}
	if err := rawKafkaRun(ctx, cl, logger, func(*kgo.Record) error { st.add(); return nil }, st.done); err != nil {
		return err
	}
	first, last := st.times()
	raw.Consume, raw.ConsumeRate, raw.ConsumeFirst = Duration(last), rate(int64(n), last), Duration(first)
	raw.ConsumeAfterFirstRate = rate(int64(n-1), last-first)
	raw.Consumed = st.count.Load()
	return nil
}

// rawKafkaRetryPath runs the raw retry path: n records waiting in main,
// each produced to retry (awaited) before it is marked, then consumed
// from retry.
func rawKafkaRetryPath(ctx context.Context, brokers []string, main, retry string, n int, logger *slog.Logger, opts []kgo.Opt,
	raw *KafkaRaw) error {
	st := newStamps(n)
	var mainN atomic.Int64
	cl, err := rawKafkaGroup(brokers, main+"-group", []string{main, retry}, logger, opts)
	if err != nil {
		return err
	}
	handle := func(r *kgo.Record) error {
		if r.Topic != main {
			st.add()
			return nil
		}
		out := &kgo.Record{Topic: retry, Key: r.Key, Value: r.Value, Headers: r.Headers}
		if err := cl.ProduceSync(ctx, out).FirstErr(); err != nil {
			return fmt.Errorf("bench: kafka: raw retry path: produce to %s: %w", retry, err)
		}
		mainN.Add(1)
		return nil
	}
	if err := rawKafkaRun(ctx, cl, logger, handle, st.done); err != nil {
		return err
	}
	first, last := st.times()
	raw.RetryPath, raw.RetryPathRate, raw.RetryPathFirst = Duration(last), rate(int64(n), last), Duration(first)
	raw.RetryMain, raw.RetryTier = mainN.Load(), st.count.Load()
	return nil
}
