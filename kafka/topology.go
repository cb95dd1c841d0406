package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/retry"
)

// MaxTiers bounds the retry tiers of one topic.
const MaxTiers = 32

// Topology is the set of topics of one main topic: the topic, one retry
// tier <topic>-retry-<delay> per delay, and the dead-letter topic
// <topic>-dlt. It is a plain value: build it with NewTopology and make
// sure it exists with Ensure.
type Topology struct {
	// Topic is the main topic.
	Topic string
	// Tiers are the delays of the retry tiers, ascending, whole
	// milliseconds.
	Tiers []time.Duration
	// Partitions and Replication are those of the topics Ensure creates
	// (-1: the broker's defaults; the tiers and the DLT take the main
	// topic's partition count when it exists).
	Partitions  int32
	Replication int16
}

// NewTopology returns the topology of topic whose retries follow p: one
// tier per distinct delay of p's schedule (without jitter), then tiers
// ten times longer each up to p's MaxRetryAfter (default 1h) for the
// longer waits (a Retry-After, an open breaker), at most MaxTiers.
func NewTopology(topic string, p retry.Policy) Topology {
	return Topology{Topic: topic, Partitions: -1, Replication: -1, Tiers: carry.Tiers(p, MaxTiers)}
}

// DLT returns the dead-letter topic's name: <topic>-dlt.
func (t Topology) DLT() string { return t.Topic + "-dlt" }

// TierTopic returns the name of the retry tier of delay d:
// <topic>-retry-<d>, d in seconds when whole (t-retry-4s), else in
// milliseconds (t-retry-1500ms).
func (t Topology) TierTopic(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%s-retry-%ds", t.Topic, d/time.Second)
	}
	return fmt.Sprintf("%s-retry-%dms", t.Topic, d/time.Millisecond)
}

// Topics returns every topic of the topology: the main topic, the tiers,
// the DLT.
func (t Topology) Topics() []string {
	out := []string{t.Topic}
	for _, d := range t.Tiers {
		out = append(out, t.TierTopic(d))
	}
	return append(out, t.DLT())
}

// Validate reports a topology that cannot exist.
func (t Topology) Validate() error {
	var errs []error
	if t.Topic == "" {
		errs = append(errs, errors.New("kafka: topology: empty topic name"))
	}
	// Kafka's own rule: [a-zA-Z0-9._-], at most 249 bytes; the suffixes
	// take up to 20.
	if len(t.Topic) > 229 || strings.ContainsFunc(t.Topic, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) {
		errs = append(errs, fmt.Errorf("kafka: topology: topic %q: want at most 229 of a-z, A-Z, 0-9, '.', '_', '-'", t.Topic))
	}
	if len(t.Tiers) == 0 {
		errs = append(errs, errors.New("kafka: topology: no retry tier"))
	}
	if len(t.Tiers) > MaxTiers {
		errs = append(errs, fmt.Errorf("kafka: topology: %d tiers, at most %d", len(t.Tiers), MaxTiers))
	}
	for i, d := range t.Tiers {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("kafka: topology: tier %v: want a whole number of milliseconds, at least 1ms", d))
		}
		if i > 0 && d <= t.Tiers[i-1] {
			errs = append(errs, fmt.Errorf("kafka: topology: tiers must be ascending and distinct, got %v after %v", d, t.Tiers[i-1]))
		}
	}
	return errors.Join(errs...)
}

// tierFor returns the longest tier not longer than d, else the shortest.
func (t Topology) tierFor(d time.Duration) time.Duration {
	i, found := slices.BinarySearch(t.Tiers, d)
	switch {
	case found:
		return t.Tiers[i]
	case i == 0:
		return t.Tiers[0]
	default:
		return t.Tiers[i-1]
	}
}

// Ensure makes sure every topic of the topology exists: with create, it
// creates the missing ones (the tiers and the DLT with the main topic's
// partition count when it exists, else Partitions); without, a missing
// topic is an error naming it and what to create.
//
// A broker that answers with a retriable error (a loaded one answers
// REQUEST_TIMED_OUT when the creation outlasts the request's timeout,
// and goes on creating; a new topic lists as LEADER_NOT_AVAILABLE until
// its leader is elected) is asked again, after a backoff, until the
// topics exist or ctx ends. The topics it created are listed again until
// every partition of theirs has a leader: a client that produced to or
// fetched from one before would wait for its next metadata refresh
// (franz-go's, seconds later), and a consumer's first retries with it.
// adm's client should have a short kgo.MetadataMinAge (50 ms, say): kadm
// lists topics from metadata cached that long.
func (t Topology) Ensure(ctx context.Context, adm *kadm.Client, create bool) error {
	if err := t.Validate(); err != nil {
		return err
	}
	created := map[string]bool{}
	for n := 1; ; n++ {
		err := t.ensureOnce(ctx, adm, create, created)
		if !errors.Is(err, errEnsureAgain) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topics of %q: %w (%w)", t.Topic, ctx.Err(), err)
		case <-time.After(ensureBackoff(n)):
		}
	}
}

// ensureMetadataAge is the MetadataMinAge of the client a consumer and
// a keeper ensure their topics with: under Ensure's first backoff, so
// that each attempt lists what the brokers answer then.
const ensureMetadataAge = 50 * time.Millisecond

// errEnsureAgain marks a retriable answer of the broker's.
var errEnsureAgain = errors.New("the broker is not done yet")

// ensureBackoff is the wait before Ensure's attempt n+1: 100 ms, doubling
// up to 2 s.
func ensureBackoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n-1, 5), 2*time.Second)
}

// retriable reports whether err is one a broker may answer otherwise
// when asked again: a retriable Kafka error, or a request that timed out
// (the caller's ctx, checked apart, has not ended).
func retriable(err error) bool {
	var ke *kerr.Error
	var ne net.Error
	return (errors.As(err, &ke) && ke.Retriable) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// ensureOnce is one attempt of Ensure; it returns an error wrapping
// errEnsureAgain when the broker's answer is worth asking again.
func (t Topology) ensureOnce(ctx context.Context, adm *kadm.Client, create bool, created map[string]bool) error {
	listed, err := adm.ListTopics(ctx, t.Topics()...)
	if err != nil {
		if retriable(err) && ctx.Err() == nil {
			return fmt.Errorf("kafka: list topics: %w: %w", errEnsureAgain, err)
		}
		return fmt.Errorf("kafka: list topics: %w", err)
	}
	partitions := t.Partitions
	if d, ok := listed[t.Topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
		partitions = int32(len(d.Partitions))
	}
	var missing []string
	for _, name := range t.Topics() {
		if d, ok := listed[name]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, name)
		} else if retriable(d.Err) {
			return fmt.Errorf("kafka: topic %q: %w: %w", name, errEnsureAgain, d.Err)
		} else if d.Err != nil {
			return fmt.Errorf("kafka: topic %q: %w", name, d.Err)
		} else if created[name] {
			for _, pd := range d.Partitions.Sorted() {
				if pd.Leader < 0 || pd.Err != nil {
					return fmt.Errorf("kafka: topic %q: %w: partition %d has no leader yet", name, errEnsureAgain, pd.Partition)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !create {
		return fmt.Errorf("kafka: topics %s do not exist, and creating them is not allowed: create them (the tiers and the DLT "+
			"with as many partitions as %q), or allow redrive to", strings.Join(missing, ", "), t.Topic)
	}
	if slices.Contains(missing, t.Topic) && len(missing) > 1 {
		// The tiers and the DLT take the main topic's partition count,
		// unknown while it is not listed. Create the main topic alone
		// first: created, its answer says how many partitions it got;
		// found existing, it was created a moment ago and not listed
		// yet, so ask again rather than give the others the broker's
		// default.
		res, err := adm.CreateTopics(ctx, partitions, t.Replication, nil, t.Topic)
		if err != nil {
			if retriable(err) && ctx.Err() == nil {
				return fmt.Errorf("kafka: create topic %q: %w: %w", t.Topic, errEnsureAgain, err)
			}
			return fmt.Errorf("kafka: create topic %q: %w", t.Topic, err)
		}
		switch r := res[t.Topic]; {
		case r.Err == nil && r.NumPartitions > 0:
			partitions = r.NumPartitions
			created[t.Topic] = true
		case r.Err == nil:
			return fmt.Errorf("kafka: topic %q: %w: created, its partition count not answered", t.Topic, errEnsureAgain)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			return fmt.Errorf("kafka: topic %q: %w: it exists but is not listed yet", t.Topic, errEnsureAgain)
		case retriable(r.Err):
			return fmt.Errorf("kafka: create topic %q: %w: %w", t.Topic, errEnsureAgain, r.Err)
		default:
			return fmt.Errorf("kafka: create topic %q: %w", t.Topic, r.Err)
		}
		missing = slices.DeleteFunc(missing, func(n string) bool { return n == t.Topic })
	}
	if err := t.create(ctx, adm, partitions, missing, created); err != nil {
		return err
	}
	return fmt.Errorf("kafka: topics %s: %w: created, their leaders not yet listed", strings.Join(missing, ", "), errEnsureAgain)
}

// create creates the topics missing, with partitions partitions; it
// returns an error wrapping errEnsureAgain when the broker's answer is
// worth asking again. A topic that already exists is left as it is; the
// ones it created are added to created.
func (t Topology) create(ctx context.Context, adm *kadm.Client, partitions int32, missing []string, created map[string]bool) error {
	res, err := adm.CreateTopics(ctx, partitions, t.Replication, nil, missing...)
	if err != nil {
		if retriable(err) && ctx.Err() == nil {
			return fmt.Errorf("kafka: create topics %s: %w: %w", strings.Join(missing, ", "), errEnsureAgain, err)
		}
		return fmt.Errorf("kafka: create topics %s: %w", strings.Join(missing, ", "), err)
	}
	var again error
	for _, name := range missing {
		r, ok := res[name]
		switch {
		case !ok || errors.Is(r.Err, kerr.TopicAlreadyExists):
		case r.Err == nil:
			created[name] = true
		case retriable(r.Err):
			again = fmt.Errorf("kafka: create topic %q: %w: %w", name, errEnsureAgain, r.Err)
		default:
			return fmt.Errorf("kafka: create topic %q: %w", name, r.Err)
		}
	}
	return again
}
