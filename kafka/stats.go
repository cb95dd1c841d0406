package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrivehq/redrive/store"
)

// TopicCount is what the cluster says of one topic of a topology.
type TopicCount struct {
	// Topic is the topic's name.
	Topic string `json:"topic"`
	// Partitions is its partition count.
	Partitions int `json:"partitions"`
	// Offsets is its end offsets minus its start offsets, over its
	// partitions: an upper bound on the records it retains, not a count
	// of them. In a topic written in transactions (an exactly-once
	// consumer's tiers and DLT, a transactional producer's topic), each
	// transaction's marker takes an offset, and so do the records of
	// aborted transactions, which no read_committed reader sees. For a
	// retry tier, the retries produced to it still retained, at most.
	Offsets int64 `json:"offsets"`
	// Records counts the records a read_committed reader sees in the
	// topic: set on the DLT of a Keeper's Status (its dead letters),
	// which reads the DLT to count them; absent elsewhere, and while the
	// DLT could not be read through.
	Records *int64 `json:"records,omitempty"`
	// Lag is how far LagGroup is behind: the offsets from its committed
	// offsets to the end offsets (an upper bound on the records it has
	// not consumed yet), except where Records is set: there, the
	// records after its committed offsets. Absent when no group was
	// asked, or the group does not consume the topic.
	Lag      *int64 `json:"lag,omitempty"`
	LagGroup string `json:"lag_group,omitempty"`
	// Missing is set when the topic does not exist.
	Missing bool `json:"missing,omitempty"`
}

// TierCount is a retry tier's TopicCount, with its delay.
type TierCount struct {
	TopicCount
	// Delay is the tier's delay (milliseconds in JSON).
	Delay store.Duration `json:"delay"`
}

// TopologyStats are the statistics of one main topic's topology, as the
// cluster has them now.
type TopologyStats struct {
	// Topic is the main topic; Group, the consumers' group whose lag was
	// asked ("" for none).
	Topic string `json:"topic"`
	Group string `json:"group,omitempty"`
	// Main, Tiers and DLT are the main topic, its retry tiers by
	// ascending delay, and its dead-letter topic.
	Main  TopicCount  `json:"main"`
	Tiers []TierCount `json:"tiers"`
	DLT   TopicCount  `json:"dlt"`
}

// StatsOptions say whose lag ReadStats reads.
type StatsOptions struct {
	// Group is the consumers' group: its lag on the main topic and on
	// the tiers (an ExactlyOnce consumer consumes each tier in a group
	// of its own, <group>-retry-<delay>, asked when Group does not
	// consume the tier). Empty: no lag.
	Group string
	// KeeperGroup is a Keeper's group: its lag on the DLT is the dead
	// letters not stored yet. Empty: no lag on the DLT.
	KeeperGroup string

	// counters count the records of the DLTs they are keyed by (a
	// Keeper's Status): their Records, and the keeper's lag on them.
	counters map[string]*recordCounter
}

// ReadStats reads the statistics of topologies from the cluster: each
// topic's offsets and partitions, and the lag of opts' groups, in
// offsets (Keeper.Status also counts the records of the DLTs).
// The tiers are the topology's and any other <topic>-retry-<delay> topic
// the cluster has (the consumers' policy may differ from the one the
// topology was built from); a topology's topic the cluster lacks is
// Missing. An error means the cluster could not be asked.
func ReadStats(ctx context.Context, adm *kadm.Client, topos []Topology, opts StatsOptions) ([]TopologyStats, error) {
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	if err := all.Error(); err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	out := make([]TopologyStats, len(topos))
	var names []string
	groups := []string{}
	for i, t := range topos {
		tiers := slices.Clone(t.Tiers)
		prefix := t.Topic + "-retry-"
		for name := range all {
			if d, ok := parseTier(strings.TrimPrefix(name, prefix)); ok && strings.HasPrefix(name, prefix) &&
				t.TierTopic(d) == name && !slices.Contains(tiers, d) {
				tiers = append(tiers, d)
			}
		}
		slices.Sort(tiers)
		s := TopologyStats{Topic: t.Topic, Group: opts.Group, Main: TopicCount{Topic: t.Topic}, DLT: TopicCount{Topic: t.DLT()},
			Tiers: make([]TierCount, 0, len(tiers))}
		for _, d := range tiers {
			s.Tiers = append(s.Tiers, TierCount{TopicCount: TopicCount{Topic: t.TierTopic(d)}, Delay: store.Duration(d)})
			if opts.Group != "" {
				groups = append(groups, opts.Group+"-retry-"+tierName(d))
			}
		}
		for _, c := range s.counts() {
			if d, ok := all[c.Topic]; ok && d.Err == nil {
				c.Partitions = len(d.Partitions)
				names = append(names, c.Topic)
			} else {
				c.Missing = true
			}
		}
		out[i] = s
	}
	if len(names) > 0 {
		starts, err := adm.ListStartOffsets(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("kafka: list start offsets: %w", err)
		}
		ends, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("kafka: list end offsets: %w", err)
		}
		for i := range out {
			for _, c := range out[i].counts() {
				ends.Each(func(e kadm.ListedOffset) {
					if e.Topic != c.Topic || e.Err != nil {
						return
					}
					if s, ok := starts.Lookup(e.Topic, e.Partition); ok && s.Err == nil && e.Offset > s.Offset {
						c.Offsets += e.Offset - s.Offset
					}
				})
			}
		}
	}
	counted := map[string]*dltRecords{}
	for i := range out {
		dlt := &out[i].DLT
		if rc := opts.counters[dlt.Topic]; rc != nil && !dlt.Missing {
			if d, err := countRecords(ctx, adm, rc, dlt); err == nil {
				counted[dlt.Topic] = d
			}
		}
	}
	if opts.Group != "" {
		groups = append(groups, opts.Group)
	}
	if opts.KeeperGroup != "" {
		groups = append(groups, opts.KeeperGroup)
	}
	if len(groups) == 0 {
		return out, nil
	}
	lags, err := adm.Lag(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("kafka: consumer lag: %w", err)
	}
	for i := range out {
		s := &out[i]
		if opts.Group != "" {
			s.Main.setLag(lags, opts.Group)
			for j := range s.Tiers {
				tc := &s.Tiers[j]
				if !tc.setLag(lags, opts.Group) {
					tc.setLag(lags, opts.Group+"-retry-"+tierName(time.Duration(tc.Delay)))
				}
			}
		}
		if opts.KeeperGroup != "" {
			if d := counted[s.DLT.Topic]; d != nil {
				d.setLag(ctx, &s.DLT, lags, opts.KeeperGroup)
			} else {
				s.DLT.setLag(lags, opts.KeeperGroup)
			}
		}
	}
	return out, nil
}

// dltRecords is a counted DLT: its counter, read up to ends (its last
// stable offsets), from starts.
type dltRecords struct {
	rc           *recordCounter
	starts, ends map[int32]int64
}

// countRecords reads what rc has not read yet of the DLT c (up to its
// last stable offsets: what a read_committed reader sees), and sets c's
// Records.
func countRecords(ctx context.Context, adm *kadm.Client, rc *recordCounter, c *TopicCount) (*dltRecords, error) {
	d := &dltRecords{rc: rc, starts: map[int32]int64{}, ends: map[int32]int64{}}
	id, err := topicID(ctx, adm, c.Topic)
	if err != nil {
		return nil, err
	}
	for _, l := range []struct {
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		into map[int32]int64
	}{{adm.ListStartOffsets, d.starts}, {adm.ListCommittedOffsets, d.ends}} {
		res, err := l.list(ctx, c.Topic)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("kafka: dead-letter topic %q: %w", c.Topic, err)
		}
		res.Each(func(o kadm.ListedOffset) { l.into[o.Partition] = o.Offset })
	}
	if err := rc.lock(ctx); err != nil {
		return nil, err
	}
	defer rc.unlock()
	if err := rc.update(ctx, id, d.starts, d.ends); err != nil {
		return nil, err
	}
	var n int64
	for p, end := range d.ends {
		n += rc.count(p, d.starts[p], end)
	}
	c.Records = &n
	return d, nil
}

// setLag sets the lag of group on the counted DLT c, in records: those
// after the group's committed offsets (all of a partition it did not
// commit in). None when ctx ends while it waits for another count.
func (d *dltRecords) setLag(ctx context.Context, c *TopicCount, lags kadm.DescribedGroupLags, group string) {
	l, ok := lags[group]
	if !ok || l.Error() != nil || len(l.Lag[c.Topic]) == 0 {
		return
	}
	if d.rc.lock(ctx) != nil {
		return
	}
	defer d.rc.unlock()
	var n int64
	for p, end := range d.ends {
		from := d.starts[p]
		if m, ok := l.Lag[c.Topic][p]; ok && m.Commit.At > from {
			from = m.Commit.At
		}
		n += d.rc.count(p, from, end)
	}
	c.Lag, c.LagGroup = &n, group
}

// counts returns the topology's counts: main, tiers, DLT.
func (s *TopologyStats) counts() []*TopicCount {
	out := []*TopicCount{&s.Main}
	for i := range s.Tiers {
		out = append(out, &s.Tiers[i].TopicCount)
	}
	return append(out, &s.DLT)
}

// setLag sets the lag of group on the topic, if the group consumes it;
// false if not.
func (c *TopicCount) setLag(lags kadm.DescribedGroupLags, group string) bool {
	l, ok := lags[group]
	if !ok || l.Error() != nil {
		return false
	}
	parts := l.Lag[c.Topic]
	if len(parts) == 0 {
		return false
	}
	var n int64
	for _, p := range parts {
		if p.Err == nil && p.Lag > 0 {
			n += p.Lag
		}
	}
	c.Lag, c.LagGroup = &n, group
	return true
}

// parseTier reads a tier's delay as TierTopic writes it: 4s, 1500ms.
func parseTier(s string) (time.Duration, bool) {
	unit := time.Second
	num, ok := strings.CutSuffix(s, "ms")
	if ok {
		unit = time.Millisecond
	} else if num, ok = strings.CutSuffix(s, "s"); !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > int64(24*365*time.Hour/unit) {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// ManagedTopic is the state of one main topic whose dead letters a
// Keeper keeps in a store, as redrive serve shows it: its topology's
// statistics from the cluster, and what its keeper did.
type ManagedTopic struct {
	TopologyStats
	// Brokers are the seed brokers.
	Brokers []string `json:"brokers"`
	// Keeper are the keeper's running totals since serve started.
	Keeper *KeeperStats `json:"keeper,omitempty"`
	// Error is set when the cluster could not be asked for the
	// statistics.
	Error string `json:"error,omitempty"`
}

// Status returns the state of each main topic whose dead letters k
// keeps, in name order: its topology's statistics, read with adm (the
// lag of group, the consumers', on the main topic and the tiers, and of
// the keeper's group on the DLT; no group: no lag on them), and the
// keeper's running totals. It counts the records of each DLT (Records,
// and the keeper's lag on it in records): the first Status reads the
// DLTs through, the next ones only what was added since; a DLT not read
// through within ctx has no Records yet (the next Status goes on from
// there). A cluster that could not be asked is reported
// in each topic's Error, its counts zero.
func (k *Keeper) Status(ctx context.Context, adm *kadm.Client, group string) []ManagedTopic {
	topos := make([]Topology, len(k.topics))
	for i, t := range k.topics {
		topos[i] = t.topo
	}
	kept := k.Stats()
	counters := map[string]*recordCounter{}
	for _, t := range k.topics {
		counters[t.topo.DLT()] = t.count
	}
	stats, err := ReadStats(ctx, adm, topos, StatsOptions{Group: group, KeeperGroup: k.opts.Group, counters: counters})
	out := make([]ManagedTopic, len(topos))
	for i, t := range topos {
		s := kept[t.Topic]
		mt := ManagedTopic{Brokers: k.opts.Brokers, Keeper: &s}
		if err != nil {
			mt.TopologyStats = TopologyStats{Topic: t.Topic, Group: group, Main: TopicCount{Topic: t.Topic},
				DLT: TopicCount{Topic: t.DLT()}, Tiers: []TierCount{}}
			mt.Error = err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				mt.Error = "Kafka did not answer in time (not connected?)"
			}
		} else {
			mt.TopologyStats = stats[i]
		}
		out[i] = mt
	}
	return out
}
