package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordCounter counts the records of one topic that a read_committed
// reader sees, between offsets. Offsets are not records: in a topic
// written in transactions (an exactly-once consumer's DLT and tiers) each
// transaction ends with a marker that takes an offset, and the records
// of aborted transactions keep theirs, though no read_committed reader
// sees either. So the counter reads the topic, and remembers where its
// records are as runs of consecutive offsets: a count reads only the
// offsets added since the last one, and forgets those the retention
// removed. Its memory is one run per stretch of records between markers
// (about one per transaction in exactly-once mode, one per partition
// otherwise). It is safe for concurrent use: counts wait for each other
// (lock), each within its context.
type recordCounter struct {
	topic string
	opts  []kgo.Opt // the seed brokers and client options, for readers

	sem   chan struct{} // holds a token while a count uses parts
	id    kadm.TopicID  // the topic's ID when parts were read (zero: unknown)
	parts map[int32]*partRecords
}

// partRecords is what a recordCounter knows of one partition: it read
// the offsets [from, to), and the records among them are at runs
// (sorted, disjoint, not adjacent).
type partRecords struct {
	from, to int64
	runs     []offRange
}

// newRecordCounter returns a counter of topic's records, reading it with
// the client options opts (seed brokers included).
func newRecordCounter(topic string, opts []kgo.Opt) *recordCounter {
	return &recordCounter{topic: topic, opts: opts, sem: make(chan struct{}, 1), parts: map[int32]*partRecords{}}
}

// lock waits for the counter, or ctx's end: a count reading a large
// topic through holds it for long, and one that waits gives up with its
// context.
func (rc *recordCounter) lock(ctx context.Context) error {
	select {
	case rc.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case rc.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: count the records of %q: waiting for another count: %w", rc.topic, ctx.Err())
	}
}

// unlock releases the counter lock took.
func (rc *recordCounter) unlock() { <-rc.sem }

// update reads what the counter has not read yet of each partition
// between starts and ends (the start offsets and the last stable
// offsets), and forgets what is below the starts. id is the topic's ID
// (kadm.TopicDetail.ID): a topic deleted and created again has a new
// one, and is read afresh. Offsets below what the counter read are an
// older listing (two counts listed them, then waited for each other):
// the counter keeps what it read. Only when the broker gives no ID
// (zero) are offsets going back taken for a new topic.
func (rc *recordCounter) update(ctx context.Context, id kadm.TopicID, starts, ends map[int32]int64) error {
	if id != rc.id {
		clear(rc.parts)
		rc.id = id
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	for p, end := range ends {
		start := starts[p]
		pr := rc.parts[p]
		if pr == nil || (id == kadm.TopicID{} && (start < pr.from || end < pr.to)) {
			// New, or (no ID to tell) the topic was recreated: read it
			// afresh.
			pr = &partRecords{from: start, to: start}
			rc.parts[p] = pr
		}
		if start > pr.from {
			pr.trim(start)
		}
		if pr.to < end {
			from[p], to[p] = pr.to, end
		}
	}
	for p := range rc.parts {
		if _, ok := ends[p]; !ok {
			delete(rc.parts, p)
		}
	}
	if len(from) == 0 {
		return nil
	}
	return rc.read(ctx, from, to)
}

// read reads each partition p from from[p] on, and adds the records a
// read_committed reader sees below to[p] (a last stable offset). It
// reads read_uncommitted, up to the high watermarks, and decides each
// transaction's records at its marker: a read_committed read stops at
// the last stable offset, and when the records just below it belong to
// a transaction aborted after another producer's transaction began (its
// marker past the last stable offset), no record nor marker shows at
// the end of the range, and the read cannot tell it is through. Below
// the last stable offset every transaction is decided, its marker below
// the high watermark. What was read is kept even when the read failed,
// up to the first record of a transaction not decided yet: the next
// update goes on from there.
func (rc *recordCounter) read(ctx context.Context, from, to map[int32]int64) error {
	cl, err := kgo.NewClient(rc.opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	hws, err := kadm.NewClient(cl).ListEndOffsets(ctx, rc.topic)
	cl.Close()
	if err == nil {
		err = hws.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: topic %q: %w", rc.topic, err)
	}
	type readState struct {
		visible []int64           // records decided visible
		pending map[int64][]int64 // per producer ID, its open transaction's records
		next    int64             // the next offset to read
	}
	states, upto := map[int32]*readState{}, map[int32]int64{}
	for p, f := range from {
		states[p] = &readState{pending: map[int64][]int64{}, next: f}
		upto[p] = to[p]
		if hw, ok := hws.Lookup(rc.topic, p); ok {
			upto[p] = max(hw.Offset, to[p])
		}
	}
	opts := append(append([]kgo.Opt(nil), rc.opts...), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	err = readCommitted(ctx, opts, rc.topic, from, upto, func(r *kgo.Record) (bool, error) {
		s := states[r.Partition]
		switch {
		case r.Attrs.IsControl():
			if isCommitMarker(r) {
				s.visible = append(s.visible, s.pending[r.ProducerID]...)
			}
			delete(s.pending, r.ProducerID)
		case r.Attrs.IsTransactional():
			s.pending[r.ProducerID] = append(s.pending[r.ProducerID], r.Offset)
		default:
			s.visible = append(s.visible, r.Offset)
		}
		s.next = r.Offset + 1
		return true, nil
	})
	for p, s := range states {
		if err == nil {
			s.next = upto[p] // read through (a compacted offset shows no record)
		}
		// Decided: below the next offset to read, the end, and the
		// first record of each transaction still open.
		decided := min(s.next, to[p])
		for _, offs := range s.pending {
			decided = min(decided, offs[0])
		}
		pr := rc.parts[p]
		slices.Sort(s.visible)
		for _, o := range s.visible {
			if o >= decided {
				break
			}
			if o >= pr.to {
				pr.add(o)
			}
		}
		pr.to = max(pr.to, decided)
	}
	return err
}

// isCommitMarker reports whether the control record r is a transaction's
// commit marker (its key: version, then type 1), not an abort.
func isCommitMarker(r *kgo.Record) bool {
	return len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1
}

// trim forgets the offsets below start.
func (pr *partRecords) trim(start int64) {
	i := sort.Search(len(pr.runs), func(i int) bool { return pr.runs[i].to > start })
	pr.runs = pr.runs[i:]
	if len(pr.runs) > 0 && pr.runs[0].from < start {
		pr.runs[0].from = start
	}
	pr.from = start
	pr.to = max(pr.to, start)
}

// add records a record at offset o, past every run.
func (pr *partRecords) add(o int64) {
	if n := len(pr.runs); n > 0 && pr.runs[n-1].to == o {
		pr.runs[n-1].to = o + 1
		return
	}
	pr.runs = append(pr.runs, offRange{o, o + 1})
}

// count returns how many records of partition p are at offsets [from,
// to), of those the counter read.
func (rc *recordCounter) count(p int32, from, to int64) int64 {
	pr := rc.parts[p]
	if pr == nil || to <= from {
		return 0
	}
	var n int64
	i := sort.Search(len(pr.runs), func(i int) bool { return pr.runs[i].to > from })
	for _, r := range pr.runs[i:] {
		if r.from >= to {
			break
		}
		n += min(r.to, to) - max(r.from, from)
	}
	return n
}

// pending returns how many records of partition p, below end, cursor c
// has not settled.
func (rc *recordCounter) pending(p int32, c cursor, end int64) int64 {
	n := rc.count(p, c.at, end)
	for _, r := range c.done {
		if r.from >= end {
			break
		}
		n -= rc.count(p, r.from, min(r.to, end))
	}
	return n
}

// topicID returns topic's ID, for recordCounter.update. kadm caches
// metadata (kgo's MetadataMinAge, 5s by default): a topic created again
// is told from the old one within that, the counter's records of the
// new one read meanwhile are forgotten then.
func topicID(ctx context.Context, adm *kadm.Client, topic string) (kadm.TopicID, error) {
	listed, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return kadm.TopicID{}, fmt.Errorf("kafka: topic %q: %w", topic, err)
	}
	d, ok := listed[topic]
	if !ok {
		return kadm.TopicID{}, fmt.Errorf("kafka: topic %q: not in the cluster's metadata", topic)
	}
	if d.Err != nil {
		return kadm.TopicID{}, fmt.Errorf("kafka: topic %q: %w", topic, d.Err)
	}
	return d.ID, nil
}
