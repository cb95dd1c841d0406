package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/fingerprint"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/internal/transport"
	"github.com/redrivehq/redrive/store"
)

// DefaultKeeperGroup is the consumer group of a Keeper, by default.
const DefaultKeeperGroup = "redrive-dlt-keeper"

// KeeperOptions configure a Keeper.
type KeeperOptions struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group whose committed offsets say how far
	// the dead-letter topics were kept (default DefaultKeeperGroup).
	Group string
	// Topologies are the main topics whose dead-letter topics the
	// keeper keeps (their tiers are only what Status reports). Required.
	Topologies []Topology
	// Add stores dead jobs, e.g. redrive.Client.AddDead. Required.
	Add func(ctx context.Context, jobs []store.DeadJob) ([]*store.Job, error)
	// NoCreateTopics makes the keeper wait for a missing dead-letter
	// topic instead of creating it (with the main topic's partition
	// count when it exists).
	NoCreateTopics bool
	// MaxBatch bounds the dead letters stored in one call of Add
	// (default 100).
	MaxBatch int
	// Logger receives the keeper's logs (default slog.Default()).
	Logger *slog.Logger
	// ClientOptions are added to the keeper's kgo client options (TLS,
	// SASL, timeouts...).
	ClientOptions []kgo.Opt
	// Bodies are the topics whose values travel sealed, and the keys
	// (see ConsumerOptions.Bodies). With StoreSeals, they decide the
	// form a dead letter's value is stored in, sealed once either way: a
	// sealed value of a topic whose store payloads StoreSeals says are
	// sealed is opened (the store seals the whole record, value
	// included), else kept sealed as it came; a plaintext value of a
	// topic Bodies seals, whose store payloads are not sealed, is sealed.
	// RegisterKind with the same Bodies seals a value stored in clear
	// again when it produces it back.
	Bodies *redrive.SealedBodies
	// StoreSeals reports whether the store seals the payloads of a
	// queue (nil: it seals none).
	StoreSeals func(queue string) bool
}

// Keeper moves the dead letters of main topics from their dead-letter
// topics <topic>-dlt into a redrive store as dead jobs, so that every DLQ
// tool works on them (list, filters, groups by cause, export, purge, edit,
// redrive, the dashboard). Each becomes a job of kind Kind in the store
// queue named like its main topic, whose payload is the Record (key, value
// and headers kept byte-exact) and whose history, attempt count, reason,
// class, error, cause, fingerprint and times are the dead letter's.
//
// The keeper consumes the dead-letter topics in one consumer group
// (KeeperOptions.Group). A record's offset is marked, then committed,
// only once the store has committed its job, so a crash or a store that
// fails loses nothing: the record is stored again later (after a pause,
// when the store failed). A record delivered again is caught by its
// idempotency key, "kafka:<origin topic>/<partition>/<offset>:<redriven>"
// (where its consumer first consumed it, and its redrive count), so it is
// kept once; so is a dead letter a consumer produced twice (at-least-once
// mode, a crash between the produce and the commit).
//
// Redriving such a job in the store runs it, and running a job of Kind
// produces the record back to its main topic (see RegisterKind).
//
// A Keeper is an alternative to the DLT operations (NewDLT): the DLT
// keeps the dead letters in Kafka and redrives them from there, moving a
// cursor group redrive-dlt-<topic>; the keeper copies them into the store
// and the store redrives them. Use one or the other for a dead-letter
// topic, not both: a dead letter the keeper stored and a DLT redrive also
// republished would run twice.
type Keeper struct {
	opts   KeeperOptions
	log    *slog.Logger
	topics []*keptTopic
	byDLT  map[string]*keptTopic

	// run guards Run: a keeper runs once.
	run lifecycle.Once
}

// keptTopic is one dead-letter topic a Keeper consumes.
type keptTopic struct {
	topo  Topology
	stats transport.KeeperCounters
	count *recordCounter // the DLT's records, for Status
}

// KeeperStats are the running totals of one main topic's dead-letter
// topic since its keeper was created.
type KeeperStats struct {
	// Kept counts the dead letters stored as new dead jobs; Duplicates,
	// those already stored (delivered again, or produced twice).
	Kept       int64 `json:"kept"`
	Duplicates int64 `json:"duplicates"`
	// StoreFailures counts the failed attempts to store dead letters:
	// their offsets stayed uncommitted, and they were stored later.
	StoreFailures int64 `json:"store_failures"`
}

// NewKeeper returns a keeper of the dead-letter topics of
// opts.Topologies.
func NewKeeper(opts KeeperOptions) (*Keeper, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("kafka: keeper: no brokers")
	}
	if len(opts.Topologies) == 0 {
		return nil, errors.New("kafka: keeper: no topics")
	}
	if opts.Add == nil {
		return nil, errors.New("kafka: keeper: no store (Add)")
	}
	if opts.Group == "" {
		opts.Group = DefaultKeeperGroup
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 100
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	k := &Keeper{opts: opts, log: opts.Logger, byDLT: map[string]*keptTopic{}}
	for _, t := range opts.Topologies {
		check := t
		if len(check.Tiers) == 0 {
			// The keeper needs no tier (a policy without retries has
			// none): only the topic and its DLT.
			check.Tiers = []time.Duration{time.Second}
		}
		if err := check.Validate(); err != nil {
			return nil, err
		}
		// The dead jobs go to the store queue named like the topic.
		if err := redrive.CheckName("queue", t.Topic); err != nil {
			return nil, fmt.Errorf("kafka: keeper: topic %q cannot name a store queue: %w", t.Topic, err)
		}
		if _, dup := k.byDLT[t.DLT()]; dup {
			return nil, fmt.Errorf("kafka: keeper: topic %q is given twice", t.Topic)
		}
		kt := &keptTopic{topo: t, count: newRecordCounter(t.DLT(), append([]kgo.Opt{kgo.SeedBrokers(opts.Brokers...)}, opts.ClientOptions...))}
		k.byDLT[t.DLT()] = kt
		k.topics = append(k.topics, kt)
	}
	sort.Slice(k.topics, func(i, j int) bool { return k.topics[i].topo.Topic < k.topics[j].topo.Topic })
	return k, nil
}

// Group returns the keeper's consumer group.
func (k *Keeper) Group() string { return k.opts.Group }

// Stats returns each main topic's running totals, by topic name.
func (k *Keeper) Stats() map[string]KeeperStats {
	out := make(map[string]KeeperStats, len(k.topics))
	for _, t := range k.topics {
		out[t.topo.Topic] = KeeperStats(t.stats.Totals())
	}
	return out
}

// Run keeps dead letters until ctx ends; the batch being stored then
// finishes, and the rest stays in the dead-letter topics, uncommitted.
// It first makes sure the dead-letter topics exist (creating the missing
// ones unless NoCreateTopics), trying again while the brokers cannot be
// reached. It returns nil after a clean shutdown, or the error that kept
// it from starting.
func (k *Keeper) Run(ctx context.Context) error {
	ctx, finish, err := k.run.Start(ctx)
	if err != nil {
		return fmt.Errorf("kafka: keeper %w", err)
	}
	defer finish()
	base := append([]kgo.Opt{kgo.SeedBrokers(k.opts.Brokers...), kgo.WithLogger(kgoLogger{k.log})}, k.opts.ClientOptions...)
	dlts := make([]string, 0, len(k.topics))
	for _, t := range k.topics {
		dlts = append(dlts, t.topo.DLT())
	}
	k.log.Info("kafka: dead-letter keeper starting", "group", k.opts.Group, "topics", dlts)
	if err := k.ensure(ctx, base); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.ConsumerGroup(k.opts.Group),
		kgo.ConsumeTopics(dlts...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Dead letters of exactly-once consumers are produced in
		// transactions: an aborted one was never dead.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Offsets are marked once stored, and only marked ones are
		// committed (after each batch, every second, and when partitions
		// are revoked).
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
	}, base...)...)
	if err != nil {
		return fmt.Errorf("kafka: keeper: %w", err)
	}
	for {
		fs := cl.PollRecords(ctx, k.opts.MaxBatch*4)
		if ctx.Err() != nil || fs.IsClientClosed() {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			k.log.Warn("kafka: keeper: fetch error", "topic", t, "partition", p, "error", err)
		})
		stopped := false
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			kt := k.byDLT[fp.Topic]
			if stopped || kt == nil {
				return
			}
			for rs := fp.Records; len(rs) > 0 && !stopped; {
				n := min(len(rs), k.opts.MaxBatch)
				if !kt.keep(ctx, k, cl, rs[:n]) {
					stopped = true
					return
				}
				rs = rs[n:]
			}
		})
		if stopped {
			break
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := cl.CommitMarkedOffsets(cctx); err != nil {
			k.log.Warn("kafka: keeper: commit failed; retrying at the next commit (the dead letters are stored)", "error", err)
		}
		cancel()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		k.log.Warn("kafka: keeper: final commit failed; the dead letters stored since the last commit will be read again "+
			"(and found already stored)", "error", err)
	}
	cancel()
	cl.Close()
	k.log.Info("kafka: dead-letter keeper stopped", "group", k.opts.Group)
	return nil
}

// ensure makes sure each dead-letter topic exists, creating the missing
// ones unless NoCreateTopics; while the brokers cannot be asked, it tries
// again (1s doubling to 30s) until ctx ends. A topic that cannot be
// created is an error.
func (k *Keeper) ensure(ctx context.Context, base []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.RequestRetries(2)}, base...)...)
	if err != nil {
		return fmt.Errorf("kafka: keeper: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	wait := time.Second
	for {
		err := k.ensureOnce(ctx, adm)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var refused *topicRefused
		if errors.As(err, &refused) {
			return err
		}
		k.log.Warn("kafka: keeper: cannot reach the brokers yet; retrying", "retry_in", wait.String(), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// topicRefused is a dead-letter topic the cluster refused to create.
type topicRefused struct {
	topic string
	err   error
}

func (e *topicRefused) Error() string {
	return fmt.Sprintf("kafka: keeper: create dead-letter topic %q: %v", e.topic, e.err)
}

func (e *topicRefused) Unwrap() error { return e.err }

// ensureOnce makes one attempt of ensure.
func (k *Keeper) ensureOnce(ctx context.Context, adm *kadm.Client) error {
	names := make([]string, 0, 2*len(k.topics))
	for _, t := range k.topics {
		names = append(names, t.topo.Topic, t.topo.DLT())
	}
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	listed, err := adm.ListTopics(lctx, names...)
	if err != nil {
		return err
	}
	for _, t := range k.topics {
		dlt := t.topo.DLT()
		if d, ok := listed[dlt]; ok && d.Err == nil {
			continue
		} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic %q: %w", dlt, d.Err)
		}
		if k.opts.NoCreateTopics {
			k.log.Warn("kafka: keeper: the dead-letter topic does not exist yet; it is kept once it does", "topic", dlt)
			continue
		}
		partitions := t.topo.Partitions
		if partitions == 0 {
			partitions = -1
		}
		if d, ok := listed[t.topo.Topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
			partitions = int32(len(d.Partitions))
		}
		replication := t.topo.Replication
		if replication == 0 {
			replication = -1
		}
		res, err := adm.CreateTopic(lctx, partitions, replication, nil, dlt)
		if err == nil {
			err = res.Err
		}
		switch {
		case err == nil:
			k.log.Info("kafka: keeper: created the dead-letter topic", "topic", dlt, "partitions", partitions)
		case errors.Is(err, kerr.TopicAlreadyExists):
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
			errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.InvalidPartitions),
			errors.Is(err, kerr.InvalidReplicationFactor), errors.Is(err, kerr.PolicyViolation):
			return &topicRefused{topic: dlt, err: err}
		default:
			return fmt.Errorf("create topic %q: %w", dlt, err)
		}
	}
	return nil
}

// keep stores a batch of one partition's dead letters, then marks their
// offsets for commit. While the store fails it tries again, a second
// apart; false means ctx ended first and nothing was marked.
func (t *keptTopic) keep(ctx context.Context, k *Keeper, cl *kgo.Client, rs []*kgo.Record) bool {
	now := time.Now()
	jobs := make([]store.DeadJob, 0, len(rs))
	for _, r := range rs {
		dj, err := DeadJobOf(r, t.topo.Topic, now)
		if err == nil {
			if sr, changed := k.storedValue(t.topo.Topic, r); changed {
				// The job's key is the dead letter's position: the same
				// however the value is stored.
				var sdj store.DeadJob
				if sdj, err = DeadJobOf(sr, t.topo.Topic, now); err == nil {
					dj.Payload = sdj.Payload
				}
			}
		}
		if err != nil {
			// Unreachable: a record always makes a dead job.
			k.log.Error("kafka: keeper: dead letter cannot be stored", "topic", r.Topic, "partition", r.Partition,
				"offset", r.Offset, "error", err)
			t.stats.StoreFailed()
			return false
		}
		jobs = append(jobs, dj)
	}
	for {
		// The offsets are committed only after the store committed.
		stored, err := t.stats.Store(ctx, k.opts.Add, jobs)
		if err == nil {
			for i, j := range stored {
				if i >= len(rs) {
					break
				}
				if j.Existing {
					k.log.Info("kafka: keeper: dead letter already stored", "topic", rs[i].Topic, "partition", rs[i].Partition,
						"offset", rs[i].Offset, "job_id", j.ID, tracectx.LogAttr(j.Trace))
				} else {
					k.log.Info("kafka: keeper: dead letter stored as a dead job", "topic", rs[i].Topic, "partition", rs[i].Partition,
						"offset", rs[i].Offset, "job_id", j.ID, tracectx.LogAttr(j.Trace), "reason", jobs[i].DeadReason)
				}
			}
			cl.MarkCommitRecords(rs...)
			return true
		}
		k.log.Warn("kafka: keeper: could not store dead letters; they stay uncommitted and are tried again", "topic", rs[0].Topic,
			"partition", rs[0].Partition, "from_offset", rs[0].Offset, "records", len(rs), "error", err)
		if !transport.Pause(ctx, time.Second) {
			return false
		}
	}
}

// storedValue returns r, a dead letter of main topic topic, with the
// value the store is to keep (see KeeperOptions.Bodies), and whether it
// differs from r's.
func (k *Keeper) storedValue(topic string, r *kgo.Record) (*kgo.Record, bool) {
	_, marked := header(r, redrive.HeaderSealed)
	storeSeals := k.opts.StoreSeals != nil && k.opts.StoreSeals(topic)
	out := *r
	out.Headers = nil
	for _, h := range r.Headers {
		if h.Key != redrive.HeaderSealed {
			out.Headers = append(out.Headers, h)
		}
	}
	switch {
	case marked && storeSeals && k.opts.Bodies != nil:
		plain, err := k.opts.Bodies.Open(topic, r.Value, true)
		if err != nil {
			return r, false // kept as it came: undecryptable in the store too
		}
		out.Value = plain
		return &out, true
	case !marked && !storeSeals && k.opts.Bodies.Seals(topic):
		out.Topic = topic
		if err := SealRecord(&out, k.opts.Bodies); err != nil {
			k.log.Error("kafka: keeper: could not seal a dead letter's value; stored as it came", "topic", topic,
				"error", err)
			return r, false
		}
		out.Topic = r.Topic
		return &out, true
	}
	return r, false
}

// DeadJobOf returns the dead job that keeps dead letter r of main topic
// topic, as a Keeper stores it: kind Kind in the store queue topic, its
// payload the Record (bound back to topic), its history, attempts,
// reason, class, error, cause, fingerprint, redrive count, first failure
// (its creation time) and death time from redrive's headers. A record
// without them (produced to the DLT by something else) is dead_lettered,
// class unknown; one whose headers cannot be read is undecodable,
// permanent. now stands in for a death time the record does not carry.
// Its idempotency key is "kafka:<origin topic>/<partition>/<offset>:<redriven>".
func DeadJobOf(r *kgo.Record, topic string, now time.Time) (store.DeadJob, error) {
	st, serr := readState(r)
	dl := deadLetterOf(r)
	var rec Record
	if serr == nil {
		rec = recordOf(r, topic, &st)
	} else {
		rec = recordOf(r, topic, nil)
		// Identity: the origin headers when they can be read (the same
		// dead letter produced twice keeps one key), else the dead
		// letter's own position.
		st = state{}
		st.originTopic, st.originPart, st.originOffset, st.hasOrigin = readOrigin(r)
	}
	payload, err := json.Marshal(rec)
	if err != nil {
		return store.DeadJob{}, err
	}
	dj := store.DeadJob{Queue: topic, Kind: Kind, Payload: payload, MaxRetries: -1, DeadAt: dl.DeadAt,
		Attempt: dl.Attempts, Redriven: dl.Redriven, DeadReason: dl.Reason, LastError: dl.Error, History: dl.History,
		CreatedAt: st.firstFailure, Trace: traceOf(r)}
	if dj.DeadAt.IsZero() {
		dj.DeadAt = r.Timestamp
	}
	if dj.DeadAt.IsZero() {
		dj.DeadAt = now
	}
	if dj.CreatedAt.IsZero() || dj.CreatedAt.After(dj.DeadAt) {
		dj.CreatedAt = dj.DeadAt
	}
	if dl.Class != "" {
		if c, err := failure.ParseClass(dl.Class); err == nil {
			dj.LastErrorClass = c
		}
	}
	if dl.Problem != "" {
		// Unreadable redrive headers: keep what can be said.
		dj.DeadReason, dj.LastErrorClass = redrive.ReasonUndecodable, failure.Permanent
		if dj.LastError == "" {
			dj.LastError = dl.Problem
		}
		dj.History = nil
	}
	if dj.DeadReason == "" {
		dj.DeadReason = "dead_lettered"
	}
	if dj.LastError == "" {
		// Produced to the DLT by something other than redrive.
		dj.LastError = "dead-lettered without redrive's headers: " + dj.DeadReason
	}
	if dj.LastErrorClass == failure.None {
		dj.LastErrorClass = failure.Unknown
	}
	if n := len(dj.History); n == 0 || dj.History[n-1].Kind != store.EventDead {
		reason := dl.Cause
		if reason == "" {
			reason = dj.DeadReason
		}
		dj.History = append(dj.History, store.Event{Kind: store.EventDead, Attempt: dj.Attempt, At: dj.DeadAt,
			Class: dj.LastErrorClass.String(), Error: dj.LastError, Reason: reason})
	}
	dj.Fingerprint = fingerprint.Of(dj.Queue, Kind, dj.LastErrorClass.String(), dl.Cause, dj.LastError)
	ot, op, oo := st.identity(r)
	dj.IdempotencyKey = "kafka:" + ot + "/" + strconv.Itoa(int(op)) + "/" + strconv.FormatInt(oo, 10) + ":" +
		strconv.Itoa(dj.Redriven)
	return dj, nil
}
