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
	// LatenessRecords is the number of records of the lateness phase
	// (0: no lateness phase): each one's first attempt fails and is
	// retried once after LatenessDelay.
	LatenessRecords int `json:"lateness_records"`
	// LatenessDelay is the lateness phase's retry delay, hence its tier
	// (default DefaultKafkaLatenessDelay).
	LatenessDelay Duration `json:"lateness_delay_ms,omitempty"`
}

// Defaults of the Kafka workload's lateness phase.
const (
	DefaultKafkaLatenessRecords = 2000
	DefaultKafkaLatenessDelay   = time.Second
)

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
	// Raw is what the raw kgo client did in the same run, phase by
	// phase, and Ratios redrive's rates over its.
	Raw    KafkaRaw    `json:"raw"`
	Ratios KafkaRatios `json:"redrive_over_raw"`
	// Lateness is what the lateness phase measured (nil: none ran).
	Lateness *KafkaLateness `json:"lateness,omitempty"`
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
	fs := []Figure{{"cluster", cluster}, {"records per phase", strconv.Itoa(r.Params.N)},
		{"partitions", strconv.Itoa(int(r.Params.Partitions))},
		{"producer", "asynchronous Produce, acks=all, idempotent, 10ms linger (kgo defaults), round-robin over the partitions"},
		{"consumer", "kafka.Consumer, at-least-once (the default mode)"},
		{"retry policy", "1 retry after 1ms (the 1ms tier), no jitter"}, {"consumer fetch max wait", fmw}}
	fs = append(fs, Figure{"raw client", "franz-go kgo alone, on topics of its own with the same partitions: the same producer " +
		"settings; group consumers committing marked offsets every second, the same fetch max wait and isolation (read_committed), " +
		"polls of up to 1000 records " +
		"run one goroutine per partition; retries produced with acks=all, awaited, before the offset is marked"})
	if r.Params.LatenessRecords > 0 {
		fs = append(fs, Figure{"lateness phase", fmt.Sprintf("%d records, the first attempt fails, 1 retry after %s (the %s tier), no jitter",
			r.Params.LatenessRecords, r.Params.LatenessDelay, r.Params.LatenessDelay)})
	}
	return fs
}

// Figures implements Result.
func (r *KafkaResult) Figures() []Figure {
	n := r.Params.N
	f := []Figure{
		{"produce", fmt.Sprintf("%d in %s = %s", n, r.Produce, fmtRate(r.ProduceRate, "records"))},
		{"consume, no-op handler", fmt.Sprintf("%d in %s = %s from the consumer's start (first after %s: group join; then %s)", n,
			r.Consume, fmtRate(r.ConsumeRate, "records"), r.ConsumeFirst, fmtRate(r.ConsumeAfterFirstRate, "records"))},
		{"consume, fails once", fmt.Sprintf("%d in %s = %s (2 attempts each, a retry tier hop; first after %s; 99%% after %s = %s)", n,
			r.FailOnce, fmtRate(r.FailOnceRate, "jobs"), r.FailOnceFirst, r.FailOnce99, fmtRate(r.FailOnce99Rate, "jobs"))},
		{"consumer", fmt.Sprintf("consumed %d, completed %d, retried %d, dead %d; waited for %d tier records' due time", r.Stats.Consumed,
			r.Stats.Completed, r.Stats.Retried, r.Stats.Dead, r.Stats.Waits)},
		{"raw kgo produce", fmt.Sprintf("%d in %s = %s", n, r.Raw.Produce, fmtRate(r.Raw.ProduceRate, "records"))},
		{"raw kgo consume, no-op", fmt.Sprintf("%d in %s = %s from the client's creation (first after %s; then %s)", n,
			r.Raw.Consume, fmtRate(r.Raw.ConsumeRate, "records"), r.Raw.ConsumeFirst, fmtRate(r.Raw.ConsumeAfterFirstRate, "records"))},
		{"raw kgo retry path", fmt.Sprintf("%d in %s = %s (consume, produce to a retry topic awaited, mark; consume again; first after %s)",
			n, r.Raw.RetryPath, fmtRate(r.Raw.RetryPathRate, "records"), r.Raw.RetryPathFirst)},
		{"redrive/raw", fmt.Sprintf("produce %.2fx, consume %.2fx (after the first %.2fx), retry path %.2fx (goal: at least 0.8x)",
			r.Ratios.Produce, r.Ratios.Consume, r.Ratios.ConsumeAfterFirst, r.Ratios.RetryPath)},
	}
	if l := r.Lateness; l != nil {
		f = append(f, Figure{"retry lateness vs failure+delay", l.SinceFailure.String() + " (goal: p99 at most 150ms)"},
			Figure{"retry lateness vs due time", l.VsDue.String()},
			Figure{"lateness consumer", fmt.Sprintf("%d in %s; completed %d, retried %d, dead %d; waited for %d tier records' due time",
				r.Params.LatenessRecords, l.Elapsed, l.Stats.Completed, l.Stats.Retried, l.Stats.Dead, l.Stats.Waits)})
	}
	return f
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
	if p.N < 1 || p.Partitions < 1 || p.FetchMaxWait < 0 || p.LatenessRecords < 0 || p.LatenessDelay < 0 {
		return nil, errors.New("bench: kafka: records and partitions must be at least 1, the fetch max wait, lateness records " +
			"and delay not negative")
	}
	if p.LatenessRecords > 0 && p.LatenessDelay == 0 {
		p.LatenessDelay = Duration(DefaultKafkaLatenessDelay)
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
	topology := func(topic string, policy retry.Policy) error {
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
	produce := func(topic, kind string, n int) (time.Duration, error) {
		rs := make([]*kgo.Record, n)
		for i := range rs {
			r, err := kafka.NewRecord(topic, kind, noopArgs{N: i}, nil)
			if err != nil {
				return 0, err
			}
			rs[i] = r
		}
		return produceAll(ctx, cl, rs)
	}
	// burn runs a consumer of topic until it completed N records and
	// returns the time it took from its start, when the first completed
	// and when 99% had: the moments the handler returned its successes,
	// so that the figures do not depend on how often they are polled.
	var burn kafkaBurn = func(topic, kind string, policy retry.Policy, n int, handler redrive.Handler) (cons *kafka.Consumer, d, first, most time.Duration, err error) {
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
			switch k := succeeded.Add(1); {
			case k == 1:
				firstAt.Store(now)
				if n == 1 {
					mostAt.Store(now)
					lastAt.Store(now)
				}
			case k == int64(n-n/100) && k == int64(n):
				mostAt.Store(now)
				lastAt.Store(now)
			case k == int64(n-n/100):
				mostAt.Store(now)
			case k == int64(n):
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
			if s.Completed >= int64(n) && lastAt.Load() != 0 {
				break
			}
			if s.Completed != last {
				last, progressed = s.Completed, time.Now()
			}
			err := ctx.Err()
			if err == nil && time.Since(progressed) > DefaultStallTimeout {
				err = fmt.Errorf("bench: kafka: %s: no record completed for %s (%d of %d)", topic, DefaultStallTimeout, s.Completed, n)
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

	// The raw client: plain topics on a client of its own, set up as cl.
	rawCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.WithLogger(benchKgoLogger{logger}))
	if err != nil {
		return nil, fmt.Errorf("bench: kafka: %w", err)
	}
	defer rawCl.Close()
	rawTopics := func(names ...string) error {
		created = append(created, names...)
		rs, err := kadm.NewClient(rawCl).CreateTopics(ctx, p.Partitions, -1, nil, names...)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			return fmt.Errorf("bench: kafka: create the raw topics: %w", err)
		}
		return nil
	}
	rawProduce := func(topic string) (time.Duration, error) {
		rs, err := rawRecords(topic, p.N)
		if err != nil {
			return 0, err
		}
		return produceAll(ctx, rawCl, rs)
	}

	// Every topic is created first, and the phases start once each one
	// has a leader on every partition: a produce to a topic just created
	// would otherwise measure the cluster's topic creation.
	noop, fail, late := base+"-noop", base+"-fail", base+"-late"
	rawNoop, rawMain, rawRetry := base+"-raw-noop", base+"-raw-main", base+"-raw-retry"
	latePolicy := retry.Policy{MaxRetries: 1, Initial: time.Duration(p.LatenessDelay), Multiplier: 1,
		MaxDelay: time.Duration(p.LatenessDelay), Jitter: retry.JitterNone}
	if err := topology(noop, policy); err != nil {
		return nil, err
	}
	if err := topology(fail, policy); err != nil {
		return nil, err
	}
	if p.LatenessRecords > 0 {
		if err := topology(late, latePolicy); err != nil {
			return nil, err
		}
	}
	if err := rawTopics(rawNoop, rawMain, rawRetry); err != nil {
		return nil, err
	}
	if err := topicsReady(ctx, adm, created, p.Partitions); err != nil {
		return nil, err
	}

	// Produce, then the main path, each by redrive then by the raw client.
	d, err := produce(noop, "bench.noop", p.N)
	if err != nil {
		return nil, err
	}
	res.Produce, res.ProduceRate = Duration(d), rate(int64(p.N), d)
	if d, err = rawProduce(rawNoop); err != nil {
		return nil, err
	}
	res.Raw.Produce, res.Raw.ProduceRate = Duration(d), rate(int64(p.N), d)
	cons1, d, first, _, err := burn(noop, "bench.noop", policy, p.N, func(context.Context, *redrive.Job) error { return nil })
	if err != nil {
		return nil, err
	}
	res.Consume, res.ConsumeRate, res.ConsumeFirst = Duration(d), rate(int64(p.N), d), Duration(first)
	res.ConsumeAfterFirstRate = rate(int64(p.N-1), d-first)
	if err := rawKafkaConsume(ctx, brokers, rawNoop, p.N, logger, consumerOpts, &res.Raw); err != nil {
		return nil, err
	}

	// The retry path: N records produced before the consumer starts.
	if _, err := produce(fail, "bench.fail-once", p.N); err != nil {
		return nil, err
	}
	cons2, d, first, most, err := burn(fail, "bench.fail-once", policy, p.N, func(_ context.Context, j *redrive.Job) error {
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
	if _, err := rawProduce(rawMain); err != nil {
		return nil, err
	}
	if err := rawKafkaRetryPath(ctx, brokers, rawMain, rawRetry, p.N, logger, consumerOpts, &res.Raw); err != nil {
		return nil, err
	}
	res.Ratios = KafkaRatios{Produce: ratio(res.ProduceRate, res.Raw.ProduceRate), Consume: ratio(res.ConsumeRate, res.Raw.ConsumeRate),
		ConsumeAfterFirst: ratio(res.ConsumeAfterFirstRate, res.Raw.ConsumeAfterFirstRate),
		RetryPath:         ratio(res.FailOnceRate, res.Raw.RetryPathRate)}

	s1, s2 := cons1.Stats()[noop], cons2.Stats()[fail]
	res.Stats = kafka.Stats{Consumed: s1.Consumed + s2.Consumed, Completed: s1.Completed + s2.Completed,
		Retried: s1.Retried + s2.Retried, Deferred: s1.Deferred + s2.Deferred, Dead: s1.Dead + s2.Dead,
		Released: s1.Released + s2.Released, Waits: s1.Waits + s2.Waits, Hops: s1.Hops + s2.Hops,
		Undecodable: s1.Undecodable + s2.Undecodable, ProduceRetries: s1.ProduceRetries + s2.ProduceRetries}
	var c checks
	c.expect("completed (no-op)", s1.Completed, int64(p.N))
	c.expect("retried (no-op)", s1.Retried, 0)
	c.expect("completed (fails once)", s2.Completed, int64(p.N))
	c.expect("retried (fails once)", s2.Retried, int64(p.N))
	c.expect("dead", res.Stats.Dead, 0)
	c.expect("raw consumed", res.Raw.Consumed, int64(p.N))
	c.expect("raw retry path, from the main topic", res.Raw.RetryMain, int64(p.N))
	c.expect("raw retry path, from the retry topic", res.Raw.RetryTier, int64(p.N))

	if p.LatenessRecords > 0 {
		l, err := kafkaLateness(p, late, latePolicy, produce, burn)
		if err != nil {
			return nil, err
		}
		res.Lateness = l
		m := int64(p.LatenessRecords)
		c.expect("lateness: completed", l.Stats.Completed, m)
		c.expect("lateness: retried", l.Stats.Retried, m)
		c.expect("lateness: dead", l.Stats.Dead, 0)
		c.expect("lateness: samples", int64(l.SinceFailure.N), m)
	}
	res.Elapsed = Duration(time.Since(res.Started))
	return res, c.err("kafka")
}

// kafkaBurn is the Kafka workload's run of a kafka.Consumer: the consumer,
// the time it took from its start to complete n records, and when the
// first completed and 99% had.
type kafkaBurn func(topic, kind string, policy retry.Policy, n int, handler redrive.Handler) (*kafka.Consumer, time.Duration,
	time.Duration, time.Duration, error)

// kafkaLateness runs the lateness phase on topic, created with policy's
// tier: LatenessRecords waiting records whose first attempt fails,
// retried once after LatenessDelay through that tier.
func kafkaLateness(p KafkaParams, topic string, policy retry.Policy, produce func(topic, kind string, n int) (time.Duration, error),
	burn kafkaBurn) (*KafkaLateness, error) {
	m, delay := p.LatenessRecords, time.Duration(p.LatenessDelay)
	if _, err := produce(topic, "bench.late", m); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	failedAt := make(map[string]time.Time, m)
	var since, due []time.Duration
	cons, d, _, _, err := burn(topic, "bench.late", policy, m, func(_ context.Context, j *redrive.Job) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if j.Attempt == 1 {
			failedAt[j.IdempotencyKey] = time.Now()
			return errors.New("fails once")
		}
		due = append(due, now.Sub(j.RunAt))
		if t, ok := failedAt[j.IdempotencyKey]; ok {
			since = append(since, now.Sub(t)-delay)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return &KafkaLateness{SinceFailure: percentiles(since), VsDue: percentiles(due), Elapsed: Duration(d),
		Stats: cons.Stats()[topic]}, nil
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
