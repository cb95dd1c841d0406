package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// KafkaParams are the parameters of the Kafka workload.
type KafkaParams struct {
	// Brokers are the seed brokers of the cluster to measure; none: the
	// workload starts an in-process kfake cluster (franz-go's fake
	// Kafka, in memory) and measures that.
	Brokers []string `json:"brokers,omitempty"`
	// InProcess is set in the result when the workload ran on the
	// in-process kfake cluster it started.
	InProcess bool `json:"in_process"`
	// N is the number of records of each phase.
	N int `json:"n"`
	// Partitions is the partition count of the main topics (the retry
	// tiers take it too).
	Partitions int32 `json:"partitions"`
	// FetchMaxWait, when set, is the consumers' kgo.FetchMaxWait: how
	// long a fetch waits for records (default: the consumer's, 100ms).
	FetchMaxWait Duration `json:"fetch_max_wait_ms,omitempty"`
}

// KafkaResult is what the Kafka workload measured.
type KafkaResult struct {
	Meta
	Params KafkaParams `json:"params"`
	// Produce is the time N asynchronous produces took to be acknowledged
	// (kgo's defaults: acks from every in-sync replica, idempotent, 10ms
	// linger), spread round-robin over the partitions; ProduceRate is N
	// over it.
	Produce     Duration `json:"produce_ms"`
	ProduceRate float64  `json:"produce_per_s"`
	// Consume is the time a kafka.Consumer took, from its start (group
	// join included), to complete N waiting records with a no-op handler;
	// ConsumeRate is N over it. ConsumeFirst is when the first one
	// completed: the group join and first fetch; ConsumeAfterFirstRate
	// is the N-1 others over the time after it.
	Consume               Duration `json:"consume_ms"`
	ConsumeRate           float64  `json:"consume_per_s"`
	ConsumeFirst          Duration `json:"consume_first_ms"`
	ConsumeAfterFirstRate float64  `json:"consume_after_first_per_s"`
	// FailOnce is the time a consumer took, from its start, to complete N
	// waiting records whose handler fails the first attempt: each one is
	// produced (acknowledged) to the 1ms retry tier, its offset marked,
	// consumed from the tier and run again. FailOnceRate is N over it;
	// FailOnceFirst is when the first completed, FailOnce99 when 99% of
	// them had (the rest is the tail of the last ones) and FailOnce99Rate
	// those 99% over it.
	FailOnce       Duration `json:"fail_once_ms"`
	FailOnceRate   float64  `json:"fail_once_per_s"`
	FailOnceFirst  Duration `json:"fail_once_first_ms"`
	FailOnce99     Duration `json:"fail_once_99_ms"`
	FailOnce99Rate float64  `json:"fail_once_99_per_s"`
	// Stats are the two consumers' totals, summed.
	Stats kafka.Stats `json:"consumer"`
}

// Info implements Result.
func (r *KafkaResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *KafkaResult) Parameters() []Figure {
	cluster := "Kafka at " + strings.Join(r.Params.Brokers, ",")
	if r.Params.InProcess {
		cluster = "kfake, in-process (franz-go's fake cluster, 1 broker, in memory: no disk I/O, no network between machines)"
	}
	fmw := "100ms (the consumer's default)"
	if r.Params.FetchMaxWait > 0 {
		fmw = r.Params.FetchMaxWait.String()
	}
	return []Figure{{"cluster", cluster}, {"records per phase", strconv.Itoa(r.Params.N)},
		{"partitions", strconv.Itoa(int(r.Params.Partitions))},
		{"producer", "asynchronous Produce, acks=all, idempotent, 10ms linger (kgo defaults), round-robin over the partitions"},
		{"consumer", "kafka.Consumer, at-least-once (the default mode)"},
		{"retry policy", "1 retry after 1ms (the 1ms tier), no jitter"}, {"consumer fetch max wait", fmw}}
}

// Figures implements Result.
func (r *KafkaResult) Figures() []Figure {
	n := r.Params.N
	return []Figure{
		{"produce", fmt.Sprintf("%d in %s = %s", n, r.Produce, fmtRate(r.ProduceRate, "records"))},
		{"consume, no-op handler", fmt.Sprintf("%d in %s = %s from the consumer's start (first after %s: group join; then %s)", n,
			r.Consume, fmtRate(r.ConsumeRate, "records"), r.ConsumeFirst, fmtRate(r.ConsumeAfterFirstRate, "records"))},
		{"consume, fails once", fmt.Sprintf("%d in %s = %s (2 attempts each, a retry tier hop; first after %s; 99%% after %s = %s)", n,
			r.FailOnce, fmtRate(r.FailOnceRate, "jobs"), r.FailOnceFirst, r.FailOnce99, fmtRate(r.FailOnce99Rate, "jobs"))},
		{"consumer", fmt.Sprintf("consumed %d, completed %d, retried %d, dead %d; waited for %d tier records' due time", r.Stats.Consumed,
			r.Stats.Completed, r.Stats.Retried, r.Stats.Dead, r.Stats.Waits)},
	}
}

// Kafka measures the Kafka transport on the cluster of p.Brokers, or on
// an in-process kfake cluster it starts when there is none, on fresh
// topics (deleted afterwards on a real cluster): N produces; a
// kafka.Consumer completing N waiting records with a no-op handler; and N
// waiting records whose handler fails once, so that each takes the retry
// path through the 1ms tier. The consumers must complete exactly N (then
// N again) records with N retries and none dead, or the result comes with
// an ErrCheck error.
func Kafka(ctx context.Context, p KafkaParams, log io.Writer) (*KafkaResult, error) {
	if p.N < 1 || p.Partitions < 1 || p.FetchMaxWait < 0 {
		return nil, errors.New("bench: kafka: records and partitions must be at least 1, the fetch max wait not negative")
	}
	var consumerOpts []kgo.Opt
	if p.FetchMaxWait > 0 {
		consumerOpts = append(consumerOpts, kgo.FetchMaxWait(time.Duration(p.FetchMaxWait)))
	}
	if log == nil {
		log = io.Discard
	}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p.InProcess = len(p.Brokers) == 0
	res := &KafkaResult{Meta: Meta{Workload: "kafka", Env: CurrentEnv(), Started: time.Now()}, Params: p}
	brokers := p.Brokers
	if p.InProcess {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(p.Partitions)))
		if err != nil {
			return nil, fmt.Errorf("bench: kafka: start kfake: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.WithLogger(benchKgoLogger{logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var b [4]byte
	rand.Read(b[:])
	base := "redrive-bench-" + hex.EncodeToString(b[:])
	policy := retry.Policy{MaxRetries: 1, Initial: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond, Jitter: retry.JitterNone}

	// topology creates a fresh main topic with its tiers and DLT.
	var created []string
	topology := func(topic string) error {
		t := kafka.NewTopology(topic, policy)
		t.Partitions = p.Partitions
		created = append(created, t.Topics()...)
		return t.Ensure(ctx, adm, true)
	}
	if !p.InProcess {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if len(created) > 0 {
				if _, err := adm.DeleteTopics(dctx, created...); err != nil {
					logger.Warn("bench: kafka: delete the topics", "topics", created, "error", err)
				}
			}
		}()
	}
	produce := func(topic, kind string) (time.Duration, error) {
		rs := make([]*kgo.Record, p.N)
		for i := range rs {
			r, err := kafka.NewRecord(topic, kind, noopArgs{N: i}, nil)
			if err != nil {
				return 0, err
			}
			rs[i] = r
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		start := time.Now()
		for _, r := range rs {
			wg.Add(1)
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("bench: kafka: produce to %s: %w", topic, err)
					}
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		return time.Since(start), firstErr
	}
	// burn runs a consumer of topic until it completed N records and
	// returns the time it took from its start, when the first completed
	// and when 99% had: the moments the handler returned its successes,
	// so that the figures do not depend on how often they are polled.
	burn := func(topic, kind string, handler redrive.Handler) (cons *kafka.Consumer, d, first, most time.Duration, err error) {
		cons, err = kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: topic + "-group",
			Topics:        map[string]kafka.TopicOptions{topic: {Partitions: p.Partitions}},
			Executor:      redrive.ExecutorOptions{Policy: &policy, Logger: logger, DisableRetryBudget: true},
			ClientOptions: consumerOpts})
		if err != nil {
			return nil, 0, 0, 0, err
		}
		var succeeded atomic.Int64
		var firstAt, mostAt, lastAt atomic.Int64 // Unix nanoseconds
		cons.HandleFunc(kind, func(ctx context.Context, j *redrive.Job) error {
			if err := handler(ctx, j); err != nil {
				return err
			}
			now := time.Now().UnixNano()
			switch n := succeeded.Add(1); {
			case n == 1:
				firstAt.Store(now)
				if p.N == 1 {
					mostAt.Store(now)
					lastAt.Store(now)
				}
			case n == int64(p.N-p.N/100) && n == int64(p.N):
				mostAt.Store(now)
				lastAt.Store(now)
			case n == int64(p.N-p.N/100):
				mostAt.Store(now)
			case n == int64(p.N):
				lastAt.Store(now)
			}
			return nil
		})
		runCtx, stop := context.WithCancel(ctx)
		runErr := make(chan error, 1)
		start := time.Now()
		go func() { runErr <- cons.Run(runCtx) }()
		last, progressed := int64(0), time.Now()
		for {
			s := cons.Stats()[topic]
			if s.Completed >= int64(p.N) && lastAt.Load() != 0 {
				break
			}
			if s.Completed != last {
				last, progressed = s.Completed, time.Now()
			}
			err := ctx.Err()
			if err == nil && time.Since(progressed) > DefaultStallTimeout {
				err = fmt.Errorf("bench: kafka: %s: no record completed for %s (%d of %d)", topic, DefaultStallTimeout, s.Completed, p.N)
			}
			if err == nil {
				select {
				case err = <-runErr:
					if err == nil {
						err = errors.New("bench: kafka: the consumer stopped")
					}
				default:
				}
			}
			if err != nil {
				stop()
				return nil, 0, 0, 0, err
			}
			time.Sleep(time.Millisecond)
		}
		stop()
		if err := <-runErr; err != nil {
			return nil, 0, 0, 0, err
		}
		at := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(start) }
		return cons, at(lastAt.Load()), at(firstAt.Load()), at(mostAt.Load()), nil
	}

	// Produce, then the main path.
	noop := base + "-noop"
	if err := topology(noop); err != nil {
		return nil, err
	}
	d, err := produce(noop, "bench.noop")
	if err != nil {
		return nil, err
	}
	res.Produce, res.ProduceRate = Duration(d), rate(int64(p.N), d)
	cons1, d, first, _, err := burn(noop, "bench.noop", func(context.Context, *redrive.Job) error { return nil })
	if err != nil {
		return nil, err
	}
	res.Consume, res.ConsumeRate, res.ConsumeFirst = Duration(d), rate(int64(p.N), d), Duration(first)
	res.ConsumeAfterFirstRate = rate(int64(p.N-1), d-first)

	// The retry path: N records produced before the consumer starts.
	fail := base + "-fail"
	if err := topology(fail); err != nil {
		return nil, err
	}
	if _, err := produce(fail, "bench.fail-once"); err != nil {
		return nil, err
	}
	cons2, d, first, most, err := burn(fail, "bench.fail-once", func(_ context.Context, j *redrive.Job) error {
		if j.Attempt == 1 {
			return errors.New("fails once")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.FailOnce, res.FailOnceRate, res.FailOnceFirst, res.FailOnce99 = Duration(d), rate(int64(p.N), d), Duration(first), Duration(most)
	res.FailOnce99Rate = rate(int64(p.N-p.N/100), most)

	s1, s2 := cons1.Stats()[noop], cons2.Stats()[fail]
	res.Stats = kafka.Stats{Consumed: s1.Consumed + s2.Consumed, Completed: s1.Completed + s2.Completed,
		Retried: s1.Retried + s2.Retried, Deferred: s1.Deferred + s2.Deferred, Dead: s1.Dead + s2.Dead,
		Released: s1.Released + s2.Released, Waits: s1.Waits + s2.Waits, Hops: s1.Hops + s2.Hops,
		Undecodable: s1.Undecodable + s2.Undecodable, ProduceRetries: s1.ProduceRetries + s2.ProduceRetries}
	res.Elapsed = Duration(time.Since(res.Started))
	if s1.Completed != int64(p.N) || s1.Retried != 0 || s2.Completed != int64(p.N) || s2.Retried != int64(p.N) || res.Stats.Dead != 0 {
		return res, fmt.Errorf("%w: kafka: completed %d then %d (want %d each), retried %d (want %d), dead %d", ErrCheck,
			s1.Completed, s2.Completed, p.N, res.Stats.Retried, p.N, res.Stats.Dead)
	}
	return res, nil
}

// benchKgoLogger sends the kgo clients' warnings and errors to slog.
type benchKgoLogger struct{ log *slog.Logger }

func (l benchKgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l benchKgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.log.Error("kafka: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		l.log.Warn("kafka: "+msg, keyvals...)
	}
}
