package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/internal/limiter"
	"github.com/redrivehq/redrive/store"
)

// TopicOptions configure one main topic of a Consumer.
type TopicOptions struct {
	// DefaultKind is the kind of records without HeaderKind (default:
	// the topic's name).
	DefaultKind string
	// Tiers overrides the delays of the retry tiers (default: one per
	// distinct delay of the topic's retry policy, see NewTopology).
	Tiers []time.Duration
	// Partitions and Replication are those of the topics the consumer
	// creates (default -1: the broker's; the tiers and the DLT take the
	// main topic's partition count when it exists).
	Partitions  int32
	Replication int16
}

// fetchMaxWait bounds how long a fetch waits for data: the lateness a
// retry may get after its partition resumes (ClientOptions may set
// another kgo.FetchMaxWait).
const fetchMaxWait = 100 * time.Millisecond

// Mode is a Consumer's delivery guarantee for what it produces.
type Mode int

const (
	// AtLeastOnce produces a retry or a dead letter, acknowledged by
	// every in-sync replica, before it commits the record's offset: a
	// crash between the two consumes the record again, so its retry or
	// dead letter may be produced twice (and its handler run twice);
	// nothing is lost.
	AtLeastOnce Mode = iota
	// ExactlyOnce produces the retries and dead letters of a polled
	// batch and commits the batch's offsets in one Kafka transaction
	// (kgo.GroupTransactSession): a crash or a rebalance aborts both, so
	// no retry or dead letter is ever lost or duplicated, and readers
	// with read_committed isolation see each once. Handlers still run at
	// least once: an aborted batch runs again. A batch's records are
	// handled before its transaction commits, so a slow record holds its
	// batch.
	ExactlyOnce
)

// String returns "at-least-once" or "exactly-once".
func (m Mode) String() string {
	if m == ExactlyOnce {
		return "exactly-once"
	}
	return "at-least-once"
}

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	// Mode is the delivery guarantee (default AtLeastOnce).
	Mode Mode
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topics are the main topics to consume, each with its options.
	// Required.
	Topics map[string]TopicOptions
	// Executor configures how attempts run, exactly as for a
	// redrive.Worker: the retry policy (Policy, and QueuePolicies per
	// topic, which also shape each topic's tiers), the classifier, the
	// breakers, the retry budget, the observer, the logger.
	Executor redrive.ExecutorOptions
	// NoCreateTopics makes the consumer check that its topics exist
	// instead of creating the missing ones.
	NoCreateTopics bool
	// ShutdownTimeout is how long running handlers may finish when Run's
	// context ends or their partition is revoked, before they are
	// canceled (default 30s); their records are consumed again, by this
	// group, without using an attempt.
	ShutdownTimeout time.Duration
	// MaxReadAhead and MaxReadAheadBytes bound, per partition, the
	// records polled but not yet handled in AtLeastOnce mode (defaults
	// DefaultMaxReadAhead, DefaultMaxReadAheadBytes): past either, the
	// poll loop waits a little (20ms) for the partition to drain to half
	// of them, and if it did not, the partition's fetching pauses until
	// it does. A
	// fetch already returned is kept whole, so a partition may hold one
	// fetch (kgo.FetchMaxPartitionBytes) more. ExactlyOnce handles each
	// polled batch before it polls again.
	MaxReadAhead      int
	MaxReadAheadBytes int
	// MaxHistory and MaxHistoryBytes bound the history a record carries
	// (defaults DefaultMaxHistory, DefaultMaxHistoryBytes).
	MaxHistory      int
	MaxHistoryBytes int
	// Limits put the records of the consumer's topics under concurrency
	// and rate limits, as redrive.Client.SetLimits puts jobs (the same
	// limits, checked the same way: a record is under the first limit
	// whose Queue, the main topic, and Kind select it, its group read
	// from its value, its dependency or its url's host). The slots hold
	// in this process (each consumer keeps its own), the rates too unless
	// LimitStore is set (see the package documentation, "Limits"). A
	// record whose group cannot be read goes to the DLT, its reason
	// naming the field.
	Limits []redrive.ConcurrencyLimit
	// LimitStore, when set, makes each limit fleet-wide. Its max: a
	// record of a limit with a max runs holding a slot of its group
	// taken from the store (store.Limits.TakeLimitSlot, one call before
	// it runs and one after), leased for LimitLease and renewed while it
	// runs, shared by every consumer of either transport on the store
	// (not with the store's own running jobs), a max set at run time
	// there (redrive limits set) winning. Its rate: every start of a
	// rate-limited record is taken from the store's rate state
	// (store.Limits.TakeLimitStarts, one call per start), which every
	// consumer and worker on the store shares with the store's own
	// limited fetches; a rate set at run time there wins. While the
	// store cannot be reached, limited records wait (see the package
	// documentation, "Limits").
	LimitStore store.Limits
	// LimitLease is the lease of a slot taken from LimitStore (default
	// 30s): renewed every third of it while its record runs, it is how
	// long the slots of a consumer that died stay taken.
	LimitLease time.Duration
	// LimitHold is how long a record waits for its limit, its partition
	// paused and its offset not committed, before it goes to the topic's
	// shortest retry tier without using an attempt (default
	// DefaultLimitHold). After such a deferral the partition's records
	// wait no more for a limit for one LimitHold: each gets one try.
	LimitHold time.Duration
	// Bodies opens the values of records marked with the header
	// redrive.HeaderSealed before the handler (and the limits) see them,
	// with its keys and for the main topic's name; retries, deferrals and
	// dead letters carry the value as it came, sealed. A marked value
	// that does not open (no keys, an unknown key id, altered bytes, not
	// an envelope) goes to the DLT at once, class permanent, reason
	// undecryptable, without its handler running. An unmarked value on a
	// topic Bodies seals is accepted as plaintext (records produced before
	// the topic was sealed) and counted (Stats.Plaintext). SealRecord
	// seals a record for such a consumer.
	Bodies *redrive.SealedBodies
	// ClientOptions are added to the consumer's kgo client options (TLS,
	// SASL, timeouts...).
	ClientOptions []kgo.Opt
}

// DefaultLimitHold is how long a record waits for its limit, by
// default, before it goes to a retry tier.
const DefaultLimitHold = 5 * time.Second

// Consumer runs the registered handlers for the records of its main
// topics and of their retry tiers, in one consumer group, with
// at-least-once delivery (see the package documentation).
//
// Each partition is consumed in order by its own goroutine, so a slow
// record or a retry waiting for its due time holds only its partition:
// the main topic keeps flowing. Each record runs through a
// redrive.Executor, the one a redrive.Worker uses, and its outcome becomes
// Kafka actions: completed, its offset is marked; a retry is produced to
// the tier of its delay with the attempt count, due time, first failure,
// origin and history in headers, then marked; a dead record (retries
// exhausted, Permanent, NeedsAuth, undecodable headers) is produced to
// <topic>-dlt with its history and reason, then marked. Marked offsets
// are committed every second and when partitions are revoked. A tier's
// record waits for its due time with its partition paused.
type Consumer struct {
	opts   ConsumerOptions
	exec   *redrive.Executor
	log    *slog.Logger
	topics map[string]*topicState // by main, tier and DLT topic name

	// run guards Run: a consumer runs once.
	run lifecycle.Once

	mu    sync.Mutex
	cl    *kgo.Client
	parts map[tpKey]*partition

	stats counters

	// failed is the error that stops Run (nil: none); stopRun ends its
	// poll loop.
	failMu  sync.Mutex
	failed  error
	stopRun context.CancelFunc

	// shrink counts, in exactly-once mode, the refusals as too large of
	// a polled record's outcome (see smaller).
	// produceMu lets a produce in AtLeastOnce mode go alone (Lock),
	// with no other produce of the consumer in flight (RLock).
	produceMu sync.RWMutex

	shrinkMu sync.Mutex
	shrink   map[srcKey]int
	// suspect holds the polled records whose outcome was in a batch
	// refused as too large, not yet produced alone.
	suspect map[srcKey]bool

	// endTimeout bounds an exactly-once transaction's produces, and then
	// its end (a minute; tests shorten it).
	endTimeout time.Duration
	// readAheadGrace is how long the poll loop waits for a partition
	// whose read-ahead reached its bound to drain before it pauses its
	// fetching (defaultReadAheadGrace; tests change it).
	readAheadGrace time.Duration
	// limits are opts.Limits, checked; limiter holds their groups, and
	// slots, when opts.LimitStore is set, their slots.
	limits  *redrive.LimitSet
	limiter *limiter.Limiter
	slots   *limiter.StoreSlots
	// holdMu guards noHoldUntil: per partition, the end of the spell
	// after a limit deferral in which its records do not wait.
	holdMu      sync.Mutex
	noHoldUntil map[tpKey]time.Time

	// sessionFailed, when set (tests), is called with the error that
	// made an exactly-once session unusable (its transaction could not
	// begin or end), as it happens: the session is then replaced.
	sessionFailed func(error)
}

// topicState is what the consumer knows of one topic it consumes.
type topicState struct {
	main *mainTopic
	tier time.Duration // 0: the main topic
}

// mainTopic is one main topic and its topology.
type mainTopic struct {
	name  string
	opts  TopicOptions
	topo  Topology
	stats topicCounters
}

type tpKey struct {
	topic     string
	partition int32
}

// Stats are a consumer's running totals since it was created, per main
// topic.
type Stats struct {
	// Consumed counts the records polled, tiers included.
	Consumed int64 `json:"consumed"`
	// Completed, Retried, Deferred (breaker and Snooze), Dead and
	// Released count the attempts by outcome.
	Completed int64 `json:"completed"`
	Retried   int64 `json:"retried"`
	Deferred  int64 `json:"deferred"`
	Dead      int64 `json:"dead"`
	Released  int64 `json:"released"`
	// Waits counts the tier records whose due time the consumer waited
	// for (partition paused); Hops, those moved on to a longer tier.
	Waits int64 `json:"waits"`
	Hops  int64 `json:"hops"`
	// Undecodable counts the records dead because their redrive headers
	// could not be read.
	Undecodable int64 `json:"undecodable"`
	// Undecryptable counts the records whose value was marked sealed but
	// did not open (ConsumerOptions.Bodies): each went to the DLT.
	Undecryptable int64 `json:"undecryptable"`
	// Plaintext counts the records of a topic whose values are sealed
	// that came unmarked, in clear, and were run as they were.
	Plaintext int64 `json:"plaintext"`
	// ProduceRetries counts the produces of retries and dead letters
	// that failed and were tried again.
	ProduceRetries int64 `json:"produce_retries"`
	// LimitDeferred counts the records that went to the shortest retry
	// tier for their limit (the hold passed), without using an attempt.
	LimitDeferred int64 `json:"limit_deferred"`
}

type topicCounters struct {
	consumed, completed, retried, deferred, dead, released, waits, hops, undecodable, produceRetries atomic.Int64
	limitDeferred, undecryptable, plaintext                                                          atomic.Int64
}

// LimitStat is one limit's use in a consumer.
type LimitStat = limiter.Stat

// LimitStats returns the use of the consumer's limits now, in this
// process, by limit name.
func (c *Consumer) LimitStats() []LimitStat { return c.limiter.Stats() }

// LimitSlotsLost returns how many fleet-wide slots (LimitStore) the
// consumer lost: their lease ended before it was renewed, their records
// ran on, and another consumer may have taken the slot meanwhile.
func (c *Consumer) LimitSlotsLost() int64 {
	if c.slots == nil {
		return 0
	}
	return c.slots.Lost()
}

type counters struct{ rebalances atomic.Int64 }

// The read-ahead of a partition in AtLeastOnce mode, by default.
const (
	DefaultMaxReadAhead      = 500
	DefaultMaxReadAheadBytes = 4 << 20
)

// NewConsumer returns a consumer of opts.Topics.
func NewConsumer(opts ConsumerOptions) (*Consumer, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("kafka: consumer: no brokers")
	}
	if opts.Group == "" {
		return nil, errors.New("kafka: consumer: no group")
	}
	if len(opts.Topics) == 0 {
		return nil, errors.New("kafka: consumer: no topics")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.MaxHistory <= 0 {
		opts.MaxHistory = DefaultMaxHistory
	}
	if opts.MaxReadAhead <= 0 {
		opts.MaxReadAhead = DefaultMaxReadAhead
	}
	if opts.MaxReadAheadBytes <= 0 {
		opts.MaxReadAheadBytes = DefaultMaxReadAheadBytes
	}
	if opts.MaxHistoryBytes <= 0 {
		opts.MaxHistoryBytes = DefaultMaxHistoryBytes
	}
	if opts.Executor.Policy != nil {
		if err := opts.Executor.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("kafka: consumer: %w", err)
		}
	}
	limits, err := redrive.NewLimitSet(opts.Limits)
	if err != nil {
		return nil, fmt.Errorf("kafka: consumer: %w", err)
	}
	if opts.LimitHold <= 0 {
		opts.LimitHold = DefaultLimitHold
	}
	if opts.Executor.MessagingSystem == "" {
		opts.Executor.MessagingSystem = MessagingSystem
	}
	exec := redrive.NewExecutor(opts.Executor)
	c := &Consumer{opts: opts, exec: exec, log: exec.Logger(), topics: map[string]*topicState{}, parts: map[tpKey]*partition{},
		endTimeout: time.Minute, readAheadGrace: defaultReadAheadGrace, limits: limits, limiter: limiter.New(nil),
		noHoldUntil: map[tpKey]time.Time{}}
	if opts.LimitStore != nil {
		c.limiter.SetRemote(limiter.StoreRemote(opts.LimitStore, c.log))
		c.slots = limiter.NewStoreSlots(opts.LimitStore, "kafka "+exec.ID(), opts.LimitLease, c.log)
		c.limiter.SetSlots(c.slots)
	}
	names := make([]string, 0, len(opts.Topics))
	for name := range opts.Topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		to := opts.Topics[name]
		if to.DefaultKind == "" {
			to.DefaultKind = name
		}
		topo := NewTopology(name, exec.PolicyFor(&redrive.Job{Queue: name, MaxRetries: -1}))
		if to.Tiers != nil {
			topo.Tiers = append([]time.Duration(nil), to.Tiers...)
		}
		if to.Partitions != 0 {
			topo.Partitions = to.Partitions
		}
		if to.Replication != 0 {
			topo.Replication = to.Replication
		}
		if err := topo.Validate(); err != nil {
			return nil, err
		}
		m := &mainTopic{name: name, opts: to, topo: topo}
		for _, t := range topo.Topics() {
			if _, dup := c.topics[t]; dup {
				return nil, fmt.Errorf("kafka: consumer: topic %q belongs to two main topics", t)
			}
		}
		c.topics[name] = &topicState{main: m}
		for _, d := range topo.Tiers {
			c.topics[topo.TierTopic(d)] = &topicState{main: m, tier: d}
		}
	}
	return c, nil
}

// HandleFunc registers the handler of a job kind. Registering after Run
// started, or twice for one kind, panics: both are programming errors.
func (c *Consumer) HandleFunc(kind string, fn redrive.Handler, opts ...redrive.HandlerOption) {
	if c.run.State() != lifecycle.Idle {
		panic("kafka: HandleFunc called after Run")
	}
	c.exec.HandleFunc(kind, fn, opts...)
}

// Executor returns the executor that runs the consumer's attempts.
func (c *Consumer) Executor() *redrive.Executor { return c.exec }

// Topology returns the topology of a main topic.
func (c *Consumer) Topology(topic string) (Topology, bool) {
	ts, ok := c.topics[topic]
	if !ok || ts.tier != 0 {
		return Topology{}, false
	}
	return ts.main.topo, true
}

// Stats returns the running totals of each main topic, by name.
func (c *Consumer) Stats() map[string]Stats {
	out := map[string]Stats{}
	for _, ts := range c.topics {
		if ts.tier != 0 {
			continue
		}
		s := &ts.main.stats
		out[ts.main.name] = Stats{Consumed: s.consumed.Load(), Completed: s.completed.Load(), Retried: s.retried.Load(),
			Deferred: s.deferred.Load(), Dead: s.dead.Load(), Released: s.released.Load(), Waits: s.waits.Load(),
			Hops: s.hops.Load(), Undecodable: s.undecodable.Load(), ProduceRetries: s.produceRetries.Load(),
			LimitDeferred: s.limitDeferred.Load(), Undecryptable: s.undecryptable.Load(), Plaintext: s.plaintext.Load()}
	}
	return out
}

// recordKey is the context key of the record a handler runs.
type recordKey struct{}

// RecordOf returns the Kafka record a handler's job came from (its key,
// headers, partition, offset), from the handler's context.
func RecordOf(ctx context.Context) (*kgo.Record, bool) {
	r, ok := ctx.Value(recordKey{}).(*kgo.Record)
	return r, ok
}

// Run ensures the topics exist (creating the missing ones unless
// NoCreateTopics) and consumes until ctx ends; then it stops consuming,
// lets running handlers finish for up to ShutdownTimeout, cancels the
// rest (their records are consumed again later, without using an
// attempt), commits what was settled and closes its client. It returns
// nil after a clean shutdown, or the error that kept it from starting or
// stopped it (an outcome that cannot be produced at all; an exactly-once
// lane fenced again and again).
func (c *Consumer) Run(ctx context.Context) error {
	ctx, finish, err := c.run.Start(ctx)
	if err != nil {
		return fmt.Errorf("kafka: consumer %w", err)
	}
	defer finish()

	// The topology's own client asks the brokers afresh at each of
	// Ensure's attempts: kadm lists topics from metadata up to
	// MetadataMinAge old (5 s by default), so a topic just created, or
	// its partitions' leaders just elected, would list as missing that
	// long.
	admCl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(c.opts.Brokers...)}, c.opts.ClientOptions...),
		kgo.MetadataMinAge(ensureMetadataAge))...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	adm := kadm.NewClient(admCl)
	for _, ts := range c.topics {
		if ts.tier == 0 {
			if err := ts.main.topo.Ensure(ctx, adm, !c.opts.NoCreateTopics); err != nil {
				admCl.Close()
				return err
			}
		}
	}
	c.carryTierOffsets(ctx, adm)
	admCl.Close()
	if c.opts.Mode == ExactlyOnce {
		return c.runExactlyOnce(ctx)
	}

	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	c.failMu.Lock()
	c.stopRun = stopRun
	c.failMu.Unlock()
	consume := make([]string, 0, len(c.topics))
	for t := range c.topics {
		consume = append(consume, t)
	}
	sort.Strings(consume)
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ConsumerGroup(c.opts.Group),
		kgo.ConsumeTopics(consume...),
		// Offsets are committed once marked, that is once a record is
		// settled (its retry or dead letter produced): every second, and
		// on revoke (see revoked).
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// Records of aborted (or still open) transactions of upstream
		// producers are not jobs.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), // each produce is awaited: nothing to batch
		// A tier partition resumed after a wait is fetched again only
		// once the fetch in flight returns: a short long-poll keeps a
		// due retry from waiting up to kgo's default 5 s for it.
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.WithLogger(kgoLogger{c.log}),
	}, c.opts.ClientOptions...)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	c.mu.Lock()
	c.cl = cl
	c.mu.Unlock()
	c.log.Info("kafka: consumer starting", "group", c.opts.Group, "topics", consume, "kinds", c.exec.Kinds())

	stopFlush, flushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flushed)
		c.flushMarks(stopFlush)
	}()
	for {
		fetches := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			c.log.Warn("kafka: fetch error", "topic", t, "partition", p, "error", err)
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			c.mu.Lock()
			pc := c.parts[tpKey{fp.Topic, fp.Partition}]
			c.mu.Unlock()
			if pc == nil {
				return // revoked meanwhile: the records are consumed again by the new owner
			}
			if ts := c.topics[fp.Topic]; ts != nil {
				ts.main.stats.consumed.Add(int64(len(fp.Records)))
			}
			pc.push(ctx, fp.Records)
		})
		cl.AllowRebalance()
	}
	// Shutdown: stop every partition (handlers get ShutdownTimeout),
	// commit what was settled, leave the group.
	c.mu.Lock()
	all := map[string][]int32{}
	for k := range c.parts {
		all[k.topic] = append(all[k.topic], k.partition)
	}
	c.mu.Unlock()
	c.stopPartitions(all)
	close(stopFlush)
	<-flushed
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		c.log.Warn("kafka: final commit failed; the records settled since the last commit will be consumed again", "error", err)
	}
	cancel()
	cl.CloseAllowingRebalance()
	c.failMu.Lock()
	err = c.failed
	c.failMu.Unlock()
	c.log.Info("kafka: consumer stopped", "group", c.opts.Group, "error", err)
	return err
}

// carryTierOffsets carries the tiers' committed offsets over from the
// other delivery mode's groups: AtLeastOnce reads the tiers in the
// consumer's group, ExactlyOnce in <group>-retry-<delay>, so a switch
// would start the new groups at the tiers' start and run every retained
// retry again. For each tier partition, the group of this mode gets the
// later of the two offsets. A failure (the group busy with another
// member) is logged: the switch then reruns those retries.
func (c *Consumer) carryTierOffsets(ctx context.Context, adm *kadm.Client) {
	byGroup := map[string][]string{} // the other mode's group: its tiers
	for name, ts := range c.topics {
		if ts.tier != 0 {
			g := c.opts.Group + "-retry-" + tierName(ts.tier)
			byGroup[g] = append(byGroup[g], name)
		}
	}
	for eosGroup, tiers := range byGroup {
		from, to := eosGroup, c.opts.Group
		if c.opts.Mode == ExactlyOnce {
			from, to = to, from
		}
		theirs, err := adm.FetchOffsetsForTopics(ctx, from, tiers...)
		if errors.Is(err, kerr.GroupIDNotFound) {
			continue
		}
		if err == nil {
			err = theirs.Error()
		}
		if err != nil {
			c.log.Warn("kafka: cannot read the tiers' offsets of the other delivery mode's group", "group", from, "error", err)
			continue
		}
		ours, err := adm.FetchOffsetsForTopics(ctx, to, tiers...)
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			c.log.Warn("kafka: cannot read the tiers' offsets", "group", to, "error", err)
			continue
		}
		carry := kadm.Offsets{}
		theirs.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil || o.At < 0 {
				return
			}
			if mine, ok := ours.Lookup(o.Topic, o.Partition); ok && mine.Err == nil && mine.At >= o.At {
				return
			}
			carry.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.At, LeaderEpoch: -1})
		})
		if len(carry) == 0 {
			continue
		}
		resp, err := adm.CommitOffsets(ctx, to, carry)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			c.log.Warn("kafka: cannot carry the tiers' offsets over from the other delivery mode's group: the retries "+
				"after them run again", "from", from, "to", to, "error", err)
			continue
		}
		c.log.Info("kafka: tiers' offsets carried over from the other delivery mode's group", "from", from, "to", to,
			"partitions", len(carry))
	}
}

// fail stops Run, which returns err (the first one given).
func (c *Consumer) fail(err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failed == nil {
		c.failed = err
		c.log.Error("kafka: consumer stopping", "error", err)
	}
	if c.stopRun != nil {
		c.stopRun()
	}
}

func (c *Consumer) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range assigned {
		ts := c.topics[topic]
		if ts == nil {
			continue
		}
		for _, p := range ps {
			k := tpKey{topic, p}
			if c.parts[k] != nil {
				continue
			}
			pc := newPartition(c, cl, ts, topic, p)
			c.parts[k] = pc
			go pc.run()
		}
	}
}

func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.stats.rebalances.Add(1)
	c.stopPartitions(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		c.log.Warn("kafka: commit on revoke failed; the records settled since the last commit will be consumed again",
			"error", err)
	}
}

func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.stats.rebalances.Add(1)
	c.stopPartitions(lost)
}

// stopPartitions stops the goroutines of the given partitions: their
// waits end at once, their running handlers within ShutdownTimeout.
func (c *Consumer) stopPartitions(tps map[string][]int32) {
	var stopped []*partition
	c.mu.Lock()
	for topic, ps := range tps {
		for _, p := range ps {
			k := tpKey{topic, p}
			if pc := c.parts[k]; pc != nil {
				delete(c.parts, k)
				stopped = append(stopped, pc)
			}
		}
	}
	c.mu.Unlock()
	for _, pc := range stopped {
		pc.stop()
	}
	if len(stopped) == 0 {
		return
	}
	var all sync.WaitGroup
	for _, pc := range stopped {
		all.Go(func() { <-pc.done })
	}
	lifecycle.Drain(lifecycle.WaitGroupDone(&all), c.opts.ShutdownTimeout, func() {
		c.log.Warn("kafka: shutdown timeout: canceling running handlers")
		for _, pc := range stopped {
			pc.hardCancel(redrive.ErrShutdown)
		}
	}, 0)
}

// partition consumes one partition, in order.
type partition struct {
	c     *Consumer
	cl    *kgo.Client
	ts    *topicState
	topic string
	id    int32

	mu      sync.Mutex
	queue   []*kgo.Record
	bytes   int  // of the records queued
	full    bool // the read-ahead reached its bound: fetching paused
	waiting bool // a tier record waits for its due time: fetching paused
	paused  bool // fetching is paused (full or waiting)
	pauses  int  // how many times fetching was paused
	// roomWanted: push waits for the queue to drain to half its bound,
	// signaled on room.
	roomWanted bool
	room       chan struct{}
	wake       chan struct{}
	quit       chan struct{}
	stopped    sync.Once
	done       chan struct{}

	hardCtx    context.Context
	hardCancel context.CancelCauseFunc

	// The fields below belong to the goroutine that runs the partition
	// (one at a time: see goexited).

	// waitFn is p.wait, bound once.
	waitFn func(time.Duration) bool
	// unmarkedN is how many records were settled since the last mark:
	// settled records are marked in runs (see settled).
	unmarkedN int

	// markMu guards unmarked, the last record settled but not yet marked
	// for commit (nil: none), which flushMarks also marks, and is held
	// while it is marked: a mark is never made after the partition's
	// goroutine ended (and a revoke committed).
	markMu   sync.Mutex
	unmarked *kgo.Record
	// goexited is the attempt whose handler called runtime.Goexit,
	// ending the partition's goroutine: run, as that goroutine unwinds,
	// hands the partition on to a new one, which settles it first.
	goexited *goexited
}

// goexited is an attempt whose handler called runtime.Goexit: its record,
// state and job, and the failed outcome decided for it.
type goexited struct {
	r  *kgo.Record
	st state
	j  *redrive.Job
	o  redrive.Outcome
}

// markEvery bounds the records a partition settles before it marks the
// last of them for commit, when its queue does not run empty first.
const markEvery = 64

func newPartition(c *Consumer, cl *kgo.Client, ts *topicState, topic string, id int32) *partition {
	hctx, hcancel := context.WithCancelCause(context.Background())
	p := &partition{c: c, cl: cl, ts: ts, topic: topic, id: id, wake: make(chan struct{}, 1), room: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{}), hardCtx: hctx, hardCancel: hcancel}
	p.waitFn = p.wait
	return p
}

// push queues polled records. Once the queue reaches its bound, it waits
// up to a grace (20ms) for the partition to drain to half of it, and
// pauses the partition's fetching only if it did not: kgo drops the
// records it holds for a paused partition, and fetches a resumed one
// only once the fetch in flight returns (up to FetchMaxWait when the
// other partitions are idle), so pausing a partition whose handlers keep
// up cost it a fetch and a long-poll each time its queue filled (4.5x its
// per-record time on kfake). A slow partition still holds the poll loop
// at most that grace before it is paused.
func (p *partition) push(ctx context.Context, rs []*kgo.Record) {
	p.mu.Lock()
	p.queue = append(p.queue, rs...)
	for _, r := range rs {
		p.bytes += recordSize(r)
	}
	over := !p.full && p.overLocked()
	if over && p.waiting {
		// A tier record waits for its due time: nothing drains before
		// it, and fetching is paused already.
		p.full, over = true, false
		p.pauseLocked()
	}
	if over {
		p.roomWanted = true
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if !over {
		return
	}
	t := time.NewTimer(p.c.readAheadGrace)
	select {
	case <-p.room:
	case <-t.C:
	case <-p.quit:
	case <-ctx.Done():
	}
	t.Stop()
	p.mu.Lock()
	p.roomWanted = false
	select {
	case <-p.room: // sent after the wait ended
	default:
	}
	if !p.full && p.overLocked() {
		p.full = true
		p.pauseLocked()
	}
	p.mu.Unlock()
}

// defaultReadAheadGrace is how long the poll loop waits for a partition
// whose read-ahead reached its bound to drain before it pauses its
// fetching.
const defaultReadAheadGrace = 20 * time.Millisecond

// overLocked reports whether the queue is at its bound; p.mu is held.
func (p *partition) overLocked() bool {
	return len(p.queue) >= p.c.opts.MaxReadAhead || p.bytes >= p.c.opts.MaxReadAheadBytes
}

// halfLocked reports whether the queue drained to half its bound; p.mu is
// held.
func (p *partition) halfLocked() bool {
	return len(p.queue) <= p.c.opts.MaxReadAhead/2 && p.bytes <= p.c.opts.MaxReadAheadBytes/2
}

// recordSize is what a queued record holds in memory, about.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + len(r.Topic) + 128
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return n
}

// pauseLocked pauses or resumes the partition's fetching as full and
// waiting say; p.mu is held.
func (p *partition) pauseLocked() {
	want := p.full || p.waiting
	if want == p.paused {
		return
	}
	tp := map[string][]int32{p.topic: {p.id}}
	if want {
		p.pauses++
		p.cl.PauseFetchPartitions(tp)
	} else {
		p.cl.ResumeFetchPartitions(tp)
	}
	p.paused = want
}

func (p *partition) stop() { p.stopped.Do(func() { close(p.quit) }) }

func (p *partition) stopping() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// run handles the partition's records in order until stopped, or until
// a record could not be settled (shutdown): nothing after it is marked.
func (p *partition) run() { p.loop(nil) }

// loop is run, on the partition's goroutine: first settling g, the
// attempt of a goroutine that ended in runtime.Goexit (nil: none).
func (p *partition) loop(g *goexited) {
	defer func() {
		if g := p.goexited; g != nil {
			// A handler called runtime.Goexit, which ends this
			// goroutine: the partition goes on, on another one, which
			// settles that attempt first (as a failed one).
			p.goexited = nil
			go p.loop(g)
			return
		}
		// Marked before done closes: a revoke commits once the
		// partition stopped.
		p.mark()
		// A partition assigned again must fetch.
		p.mu.Lock()
		p.full, p.waiting = false, false
		p.pauseLocked()
		p.mu.Unlock()
		p.hardCancel(nil)
		close(p.done)
	}()
	if g != nil {
		out, ok := p.c.settle(p.ts.main, g.r, g.st, g.j, &g.o)
		if !ok || !p.produced(g.r, out) {
			return
		}
	}
	for {
		p.mu.Lock()
		var r *kgo.Record
		if len(p.queue) > 0 {
			r = p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			p.bytes -= recordSize(r)
			if p.full && p.halfLocked() {
				p.full = false
				p.pauseLocked()
			}
			if p.roomWanted && p.halfLocked() {
				p.roomWanted = false
				select {
				case p.room <- struct{}{}:
				default:
				}
			}
		}
		p.mu.Unlock()
		if r == nil {
			// Nothing left to run: what was settled is marked now.
			p.mark()
			select {
			case <-p.quit:
				return
			case <-p.wake:
				continue
			}
		}
		if p.stopping() || !p.handle(r) {
			return
		}
	}
}

// handle runs one record and settles it; false means it was not settled
// and the partition must stop. The attempt runs on the partition's
// goroutine (see attempt).
func (p *partition) handle(r *kgo.Record) bool {
	st, j, out, ok := p.c.prepare(r, p.ts, p.waitFn)
	if !ok {
		return false
	}
	if j != nil {
		sel, limited, lout, ok := p.c.admit(r, p.ts.main, st, j, p.holdLane)
		if !ok {
			return false
		}
		if lout != nil {
			return p.produced(r, lout)
		}
		if limited {
			defer p.c.limiter.Release(sel) // also when the handler calls runtime.Goexit
		}
		o := p.attempt(r, st, j)
		if out, ok = p.c.settle(p.ts.main, r, st, j, &o); !ok {
			return false
		}
	}
	return p.produced(r, out)
}

// produced settles r whose outcome produces out (nil: nothing): out
// produced first, then r marked. False: r was not settled.
func (p *partition) produced(r, out *kgo.Record) bool {
	if out == nil {
		p.settled(r)
		return true
	}
	// Marked in order: what was settled before r, then r once out is
	// produced.
	p.mark()
	return p.produceThenMark(r, out)
}

// settled notes r settled: it is marked for commit with the records
// settled after it, when the queue runs empty, after markEvery records,
// before a produce or a wait, and when the partition stops (marking r
// marks every record before it: a partition is settled in order).
//
// The consumer's flushMarks also marks it, every markFlushInterval, so
// that a record settled before a long attempt is committed while that
// attempt runs, as it was when each record was marked at once.
func (p *partition) settled(r *kgo.Record) {
	p.markMu.Lock()
	p.unmarked = r
	p.markMu.Unlock()
	if p.unmarkedN++; p.unmarkedN >= markEvery {
		p.mark()
	}
}

// mark marks the last record settled for commit; on the partition's
// goroutine.
func (p *partition) mark() {
	p.flushMark()
	p.unmarkedN = 0
}

// flushMark marks the last record settled for commit, if not yet; on any
// goroutine.
func (p *partition) flushMark() {
	p.markMu.Lock()
	if p.unmarked != nil {
		p.cl.MarkCommitRecords(p.unmarked)
		p.unmarked = nil
	}
	p.markMu.Unlock()
}

// markFlushInterval is how often flushMarks marks the records the
// partitions settled but did not mark yet.
const markFlushInterval = 250 * time.Millisecond

// flushMarks marks, every markFlushInterval until stop closes, the
// records the partitions settled but did not mark yet (a partition marks
// its settled records in runs, and a run waits while an attempt runs).
func (c *Consumer) flushMarks(stop <-chan struct{}) {
	t := time.NewTicker(markFlushInterval)
	defer t.Stop()
	var ps []*partition
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		for _, p := range c.parts {
			ps = append(ps, p)
		}
		c.mu.Unlock()
		for i, p := range ps {
			p.flushMark()
			ps[i] = nil
		}
		ps = ps[:0]
	}
}

// attempt runs the attempt of j, record r's job, on the partition's
// goroutine: a goroutine per attempt (as execute) costs a goroutine
// start, its stack's growth and two wake-ups across threads per record.
// A handler that calls runtime.Goexit (as t.FailNow does) ends the
// partition's goroutine: its attempt, which Execute finished and reported
// but could not return, is a failed one (Unknown class, retried), left in
// p.goexited for run to hand on with the partition.
func (p *partition) attempt(r *kgo.Record, st state, j *redrive.Job) redrive.Outcome {
	actx, cancel := context.WithCancelCause(context.WithValue(p.hardCtx, recordKey{}, r))
	start := time.Now()
	returned := false
	defer func() {
		if !returned {
			cancel(nil)
			o := p.c.exec.Fail(j, failure.Verdict{Class: failure.Unknown, Reason: "goexit"},
				"handler did not return: it called runtime.Goexit", start, time.Now())
			p.goexited = &goexited{r: r, st: st, j: j, o: o}
		}
	}()
	o := p.c.exec.Execute(actx, j)
	returned = true
	cancel(nil)
	return o
}

// decide runs one record and returns the record its outcome produces (a
// retry, a hop to a longer tier, a dead letter; nil: nothing to produce),
// or settled false when the attempt was interrupted (shutdown, revoke)
// and the record must be consumed again. A tier's record not yet due is
// waited for with wait, which returns false when interrupted. The attempt
// runs on a goroutine of its own (see execute).
func (c *Consumer) decide(hardCtx context.Context, r *kgo.Record, ts *topicState, wait func(time.Duration) bool,
	hold func(func(context.Context))) (*kgo.Record, bool) {
	st, j, out, ok := c.prepare(r, ts, wait)
	if j == nil {
		return out, ok
	}
	sel, limited, lout, ok := c.admit(r, ts.main, st, j, hold)
	if !ok || lout != nil {
		return lout, ok
	}
	if limited {
		defer c.limiter.Release(sel)
	}
	actx, cancel := context.WithCancelCause(context.WithValue(hardCtx, recordKey{}, r))
	o := c.execute(actx, j)
	cancel(nil)
	return c.settle(ts.main, r, st, j, &o)
}

// prepare is decide up to the attempt: it returns the job to run (with
// the record's state), or, when no attempt is to run (j nil), what decide
// returns: an undecodable record's dead letter, a tier record's hop, or
// settled false when a wait was interrupted.
func (c *Consumer) prepare(r *kgo.Record, ts *topicState, wait func(time.Duration) bool) (st state, j *redrive.Job,
	out *kgo.Record, settled bool) {
	m := ts.main
	st, err := readState(r)
	if err != nil {
		return st, nil, c.undecodable(m, r, err), true
	}
	if ts.tier != 0 {
		// A retry is never early: wait for its due time, the partition
		// paused meanwhile. A wait much longer than this tier's delay
		// does not hold the records behind it: past 1.5 times it, it
		// moves on to a longer tier; past twice it with no longer tier
		// that fits (the top tier, a long Snooze or Retry-After), it
		// waits until it has spent its tier's delay here and goes round
		// the tier again.
		if rem := time.Until(st.due); rem > 0 {
			longer := m.topo.tierFor(rem)
			if rem > ts.tier+ts.tier/2 && longer > ts.tier {
				m.stats.hops.Add(1)
				return st, nil, forwarded(r, m.topo.TierTopic(longer), nil), true
			}
			if rem > 2*ts.tier {
				if hold := min(time.Until(r.Timestamp.Add(ts.tier)), ts.tier); hold > 0 {
					m.stats.waits.Add(1)
					if !wait(hold) {
						return st, nil, nil, false
					}
				}
				if time.Until(st.due) > 0 {
					m.stats.hops.Add(1)
					return st, nil, forwarded(r, r.Topic, nil), true
				}
			} else {
				m.stats.waits.Add(1)
				if !wait(rem) {
					return st, nil, nil, false
				}
			}
		}
	}
	j = jobOf(r, m.name, m.opts.DefaultKind, st, time.Now())
	c.open(m, r, j)
	return st, j, nil, true
}

// open puts in j.Payload the value of r, a record of main topic m,
// opened when it is marked sealed (redrive.HeaderSealed); one that does
// not open leaves the payload null and sets PayloadError, which makes
// the executor bury the job at once, permanent, undecryptable, without
// calling its handler (its dead letter carries the value as it came).
func (c *Consumer) open(m *mainTopic, r *kgo.Record, j *redrive.Job) {
	_, marked := header(r, redrive.HeaderSealed)
	if !marked {
		if c.opts.Bodies.Seals(m.name) {
			m.stats.plaintext.Add(1)
		}
		return
	}
	p, err := c.opts.Bodies.Open(m.name, r.Value, true)
	if err != nil {
		m.stats.undecryptable.Add(1)
		c.log.Warn("kafka: record value cannot be opened; it goes to the DLT", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "error", err)
		j.Payload, j.PayloadError = nil, store.ReasonUndecryptable+": "+err.Error()
		return
	}
	j.Payload = p
}

// execute runs the attempt of j on a goroutine of its own, so that a
// handler that calls runtime.Goexit (as t.FailNow does) ends that
// goroutine only: its attempt, which Execute finished and reported but
// could not return, is a failed one (Unknown class, retried), and the
// partition or batch that called goes on. Without it, the partition's
// goroutine exited with the record unsettled and the records behind it
// held, and in exactly-once mode the rest of the batch was committed
// without running.
func (c *Consumer) execute(ctx context.Context, j *redrive.Job) redrive.Outcome {
	start := time.Now()
	var o redrive.Outcome
	returned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		o = c.exec.Execute(ctx, j)
		returned = true
	}()
	<-done
	if !returned {
		o = c.exec.Fail(j, failure.Verdict{Class: failure.Unknown, Reason: "goexit"},
			"handler did not return: it called runtime.Goexit", start, time.Now())
	}
	return o
}

// holdLane runs hold (a wait for a limit) with the partition paused and
// what it settled marked, and a context that ends when the partition
// stops.
func (p *partition) holdLane(hold func(ctx context.Context)) {
	p.mark()
	p.mu.Lock()
	p.waiting = true
	p.pauseLocked()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting = false
		p.pauseLocked()
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	hold(ctx)
}

// admit takes a start of the limit j is under, if any (limited: Release
// it once the attempt ended), waiting for it with hold (its partition
// paused, its offset not committed) for up to LimitHold, or one try when
// the partition deferred a record for its limit less than LimitHold ago.
// It returns instead the record to produce for r: its deferral to the
// shortest retry tier, due after that tier's delay, its attempt count
// unchanged (no attempt used), or the dead letter of a record whose group
// cannot be read. Not ok: the partition stopped meanwhile, r unsettled.
func (c *Consumer) admit(r *kgo.Record, m *mainTopic, st state, j *redrive.Job,
	hold func(func(ctx context.Context))) (sel redrive.SelectedLimit, limited bool, out *kgo.Record, ok bool) {
	if j.PayloadError != "" {
		return sel, false, nil, true // no handler runs: no limit holds it
	}
	sel, limited, err := c.limits.Select(m.name, j.Kind, j.Payload, j.Dependency)
	if err != nil {
		return sel, false, c.undecodable(m, r, err), true
	}
	if !limited {
		return sel, false, nil, true
	}
	if granted, _, _ := c.limiter.Try(context.Background(), sel); granted {
		return sel, true, nil, true
	}
	tp := tpKey{r.Topic, r.Partition}
	now := c.limiter.Now()
	deadline := now.Add(c.opts.LimitHold)
	c.holdMu.Lock()
	if now.Before(c.noHoldUntil[tp]) {
		deadline = now
	}
	c.holdMu.Unlock()
	outcome := limiter.Stopped
	if deadline.After(now) {
		hold(func(ctx context.Context) { outcome, _ = c.limiter.Acquire(ctx, sel, deadline, nil) })
	} else {
		outcome = limiter.Held
	}
	switch outcome {
	case limiter.Granted:
		return sel, true, nil, true
	case limiter.Stopped:
		return sel, false, nil, false
	}
	c.holdMu.Lock()
	c.noHoldUntil[tp] = c.limiter.Now().Add(c.opts.LimitHold)
	c.holdMu.Unlock()
	m.stats.limitDeferred.Add(1)
	tier := m.topo.Tiers[0]
	t, part, off := st.identity(r)
	set := map[string]string{HeaderOriginTopic: t, HeaderOriginPartition: strconv.Itoa(int(part)),
		HeaderOriginOffset: strconv.FormatInt(off, 10), HeaderAttempt: strconv.Itoa(st.attempts),
		HeaderDue: strconv.FormatInt(carry.CeilMilli(time.Now().Add(tier)), 10)}
	return sel, false, forwarded(r, m.topo.TierTopic(tier), set), true
}

// wait waits d with the partition paused; false if stopped meanwhile.
func (p *partition) wait(d time.Duration) bool {
	p.mark()
	p.mu.Lock()
	p.waiting = true
	p.pauseLocked()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting = false
		p.pauseLocked()
		p.mu.Unlock()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.quit:
		return false
	}
}

// settle returns the record an outcome produces (nil: none), or false
// when the attempt was interrupted and the record must be consumed again.
func (c *Consumer) settle(m *mainTopic, r *kgo.Record, st state, j *redrive.Job, o *redrive.Outcome) (*kgo.Record, bool) {
	opts := &c.opts
	switch o.Kind {
	case store.Complete, store.Cancel:
		m.stats.completed.Add(1)
		return nil, true
	case store.Release:
		m.stats.released.Add(1)
		return nil, false
	case store.Retry, store.Snooze:
		attempts := j.Attempt
		if o.Kind == store.Snooze {
			attempts = st.attempts
			m.stats.deferred.Add(1)
		} else {
			m.stats.retried.Add(1)
		}
		hist, dropped := carry.History(append(j.History, *o.Event), st.dropped, opts.MaxHistory, opts.MaxHistoryBytes)
		set := carried(r, st, o, hist, dropped)
		set[HeaderAttempt] = strconv.Itoa(attempts)
		set[HeaderDue] = strconv.FormatInt(carry.CeilMilli(o.RunAt), 10)
		if o.Kind == store.Retry {
			set[HeaderLastDelay] = strconv.FormatInt(time.Duration(o.RetryDelay).Milliseconds(), 10)
		}
		return forwarded(r, m.topo.TierTopic(m.topo.tierFor(o.RunAt.Sub(o.At))), set), true
	default: // store.Bury
		m.stats.dead.Add(1)
		events := j.History
		if o.Event != nil {
			events = append(events, *o.Event)
		}
		hist, dropped := carry.History(events, st.dropped, opts.MaxHistory, opts.MaxHistoryBytes)
		set := carried(r, st, o, hist, dropped)
		set[HeaderAttempt] = strconv.Itoa(j.Attempt)
		for k, v := range deadHeaders(o) {
			set[k] = v
		}
		return forwarded(r, m.topo.DLT(), set, HeaderDue), true
	}
}

// carried are the headers every forwarded record carries: history,
// origin, first failure.
func carried(r *kgo.Record, st state, o *redrive.Outcome, hist string, dropped int) map[string]string {
	t, part, off := st.identity(r)
	first := st.firstFailure
	if first.IsZero() {
		first = o.At
	}
	set := map[string]string{HeaderHistory: hist, HeaderOriginTopic: t, HeaderOriginPartition: strconv.Itoa(int(part)),
		HeaderOriginOffset: strconv.FormatInt(off, 10), HeaderFirstFailure: strconv.FormatInt(first.UnixMilli(), 10)}
	if dropped > 0 {
		set[HeaderHistoryDropped] = strconv.Itoa(dropped)
	}
	return set
}

// deadHeaders are the headers of a dead letter: why and when it died.
func deadHeaders(o *redrive.Outcome) map[string]string {
	h := map[string]string{HeaderReason: o.DeadReason, HeaderClass: o.ClassName(), HeaderError: o.Error,
		HeaderDeadAt: strconv.FormatInt(o.At.UnixMilli(), 10)}
	if o.Event != nil && o.Event.Reason != "" {
		h[HeaderCause] = o.Event.Reason
	}
	return h
}

// undecodable returns the dead letter of a record whose redrive headers
// cannot be read, its headers as they came.
func (c *Consumer) undecodable(m *mainTopic, r *kgo.Record, err error) *kgo.Record {
	m.stats.undecodable.Add(1)
	m.stats.dead.Add(1)
	now := time.Now()
	o := &redrive.Outcome{Kind: store.Bury, At: now, Class: failure.Permanent, DeadReason: redrive.ReasonUndecodable,
		Error: err.Error()}
	c.log.Warn("kafka: record cannot be decoded; moved to the DLT", "topic", r.Topic, "partition", r.Partition,
		"offset", r.Offset, "dlt", m.topo.DLT(), "error", err)
	set := deadHeaders(o)
	// Its origin: as its headers say when they can be read (a retry's),
	// else where it was consumed.
	ot, op, oo, ok := readOrigin(r)
	if !ok {
		ot, op, oo = r.Topic, r.Partition, r.Offset
	}
	set[HeaderOriginTopic], set[HeaderOriginPartition], set[HeaderOriginOffset] = ot, strconv.Itoa(int(op)),
		strconv.FormatInt(oo, 10)
	return forwarded(r, m.topo.DLT(), set)
}

// produceThenMark produces out, acknowledged by every in-sync replica,
// then marks r's offset for commit: a crash between the two consumes r
// again (a duplicate retry or dead letter), never loses it. A failed
// produce is tried again, with backoff, until it succeeds or the
// partition stops (false: r stays unmarked); one refused as too large is
// produced smaller (see smaller), and when nothing smaller is left the
// consumer stops with the error.
func (p *partition) produceThenMark(r, out *kgo.Record) bool {
	backoff := 100 * time.Millisecond
	orig, shrunk := out, 0
	alone := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// kgo keeps a record's first context: each attempt needs its own.
		out.Context = ctx
		// The client batches concurrent produces to a partition, and
		// the broker refuses a batch as too large, not a record: a
		// record refused is produced alone (no other produce in
		// flight) before it is deemed too large itself.
		if alone {
			p.c.produceMu.Lock()
		} else {
			p.c.produceMu.RLock()
		}
		err := p.cl.ProduceSync(ctx, out).FirstErr()
		if alone {
			p.c.produceMu.Unlock()
		} else {
			p.c.produceMu.RUnlock()
		}
		cancel()
		if err == nil {
			madeDead(p.ts.main, orig, out)
			p.cl.MarkCommitRecords(r)
			return true
		}
		if tooLarge(err) && !alone {
			alone = true // refused with others, maybe: try it alone
			continue
		}
		if tooLarge(err) {
			// Trying again cannot succeed: produce it smaller.
			shrunk++
			if out = p.c.smaller(p.ts.main, r, orig, shrunk, err); out == nil {
				p.c.fail(fmt.Errorf("kafka: record %s/%d/%d: its outcome cannot be produced, even as a dead letter without "+
					"its value: %w", r.Topic, r.Partition, r.Offset, err))
				return false
			}
			continue
		}
		p.ts.main.stats.produceRetries.Add(1)
		p.c.log.Warn("kafka: produce failed; retrying", "topic", out.Topic, "from_topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "delay", backoff, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.quit:
			t.Stop()
			return false
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// kgoLogger sends kgo's warnings and errors to slog.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.log.Error("kafka: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		l.log.Warn("kafka: "+msg, keyvals...)
	}
}
