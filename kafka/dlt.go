package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/internal/transport"
	"github.com/redrivehq/redrive/store"
)

// MaxPeek bounds how many dead letters one Peek reads.
const MaxPeek = 1000

// DLTOptions configure a DLT.
type DLTOptions struct {
	// Cursor is the consumer group whose committed offsets mark how far
	// redrives went (default "redrive-dlt-<topic>"): Count's Pending and
	// a Redrive without From start there.
	Cursor string
	// ClientOptions are added to the kgo client's options.
	ClientOptions []kgo.Opt
	// TracerProvider, when set, makes Redrive start a span for each dead
	// letter it redrives, a child of the caller's span linked to the
	// trace the dead letter carries.
	TracerProvider trace.TracerProvider
}

// DLT operates on the dead-letter topic of one main topic: count, peek
// with history, and redrive to the main topic. A DLT is append-only: a
// redrive does not remove records, it moves a cursor (a consumer group's
// committed offsets) past them.
type DLT struct {
	opts   []kgo.Opt // the seed brokers and the ClientOptions, for readers
	cl     *kgo.Client
	adm    *kadm.Client
	topo   Topology
	cursor string
	count  *recordCounter // where the DLT's records are, for Count
	tracer trace.Tracer   // nil: no spans
	bodies *redrive.SealedBodies
}

// SetBodies makes Peek open the values marked sealed
// (redrive.HeaderSealed) with b's keys; without it, or without the key,
// they show sealed, with DeadLetter.ValueError. Redrive never opens a
// value: it produces it back as it is, sealed.
func (q *DLT) SetBodies(b *redrive.SealedBodies) { q.bodies = b }

// NewDLT returns the operations on the dead letters of topic.
func NewDLT(brokers []string, topic string, opts DLTOptions) (*DLT, error) {
	t := Topology{Topic: topic, Tiers: []time.Duration{time.Second}}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if len(brokers) == 0 {
		return nil, errors.New("kafka: dlt: no brokers")
	}
	if opts.Cursor == "" {
		opts.Cursor = "redrive-dlt-" + topic
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts.ClientOptions...)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0)}, base...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &DLT{opts: base, cl: cl, adm: kadm.NewClient(cl), topo: t, cursor: opts.Cursor,
		count: newRecordCounter(t.DLT(), base), tracer: newTracer(opts.TracerProvider)}, nil
}

// Name returns the dead-letter topic's name.
func (q *DLT) Name() string { return q.topo.DLT() }

// Close releases the DLT's client.
func (q *DLT) Close() { q.cl.Close() }

// DLTCount says how many dead letters a DLT holds: records, as a
// read_committed reader sees them, not offsets (in exactly-once mode the
// DLT's offsets also hold transaction markers and aborted dead letters).
type DLTCount struct {
	// Total counts the dead letters the topic holds (within its
	// retention).
	Total int64 `json:"total"`
	// Pending counts those not redriven yet (nor discarded): after the
	// redrive cursor, less those redriven past the dead letters a
	// filtered redrive skipped.
	Pending int64 `json:"pending"`
}

// span is the offsets of one partition: start, end (the last stable
// offset: the records after it belong to open transactions), and the
// redrive cursor.
type span struct {
	start, end int64
	cur        cursor
}

// spans reads each partition's start, end and cursor.
func (q *DLT) spans(ctx context.Context) (map[int32]*span, error) {
	dlt := q.topo.DLT()
	starts, err := q.adm.ListStartOffsets(ctx, dlt)
	if err != nil {
		return nil, fmt.Errorf("kafka: dead-letter topic %q: %w", dlt, err)
	}
	if err := starts.Error(); err != nil {
		return nil, fmt.Errorf("kafka: dead-letter topic %q: %w", dlt, err)
	}
	// read_committed, as the DLT is read: the dead letters of open
	// transactions are not there yet.
	ends, err := q.adm.ListCommittedOffsets(ctx, dlt)
	if err != nil {
		return nil, fmt.Errorf("kafka: dead-letter topic %q: %w", dlt, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("kafka: dead-letter topic %q: %w", dlt, err)
	}
	out := map[int32]*span{}
	starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = &span{start: o.Offset, cur: cursor{at: o.Offset}} })
	ends.Each(func(o kadm.ListedOffset) {
		if s := out[o.Partition]; s != nil {
			s.end = o.Offset
		}
	})
	committed, err := q.adm.FetchOffsetsForTopics(ctx, q.cursor, dlt)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil // no redrive yet: the cursor is at the start
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive cursor %q: %w", q.cursor, err)
	}
	var cerr error
	committed.Each(func(o kadm.OffsetResponse) {
		s := out[o.Partition]
		if s == nil || o.Err != nil || o.At < 0 {
			return
		}
		c, err := parseCursor(o.At, o.Metadata)
		if err != nil {
			cerr = errors.Join(cerr, fmt.Errorf("kafka: redrive cursor %q, partition %d: %w", q.cursor, o.Partition, err))
			return
		}
		// Offsets below the start are gone: nothing pending there.
		c.settle(c.at, s.start)
		s.cur = c
	})
	if cerr != nil {
		return nil, cerr
	}
	return out, nil
}

// Count returns how many dead letters the DLT holds, and how many of
// them were not redriven yet. It counts records, not offsets: the first
// Count of a DLT reads it through (read_committed), the next ones only
// what was added since; a DLT remembers where its dead letters are (one
// offset range per transaction in exactly-once mode, per partition
// otherwise).
func (q *DLT) Count(ctx context.Context) (DLTCount, error) {
	id, err := topicID(ctx, q.adm, q.topo.DLT())
	if err != nil {
		return DLTCount{}, err
	}
	spans, err := q.spans(ctx)
	if err != nil {
		return DLTCount{}, err
	}
	rc := q.count
	if err := rc.lock(ctx); err != nil {
		return DLTCount{}, err
	}
	defer rc.unlock()
	starts, ends := spanBounds(spans)
	if err := rc.update(ctx, id, starts, ends); err != nil {
		return DLTCount{}, fmt.Errorf("kafka: count the dead letters of %q: %w", q.topo.DLT(), err)
	}
	var c DLTCount
	for p, s := range spans {
		c.Total += rc.count(p, s.start, s.end)
		c.Pending += rc.pending(p, s.cur, s.end)
	}
	return c, nil
}

// CountRange returns how many dead letters the DLT holds at the offsets
// from (included) to (excluded) per partition, as a Redrive with From
// and To would read them: only the partitions from names, to the end
// where to does not bound them.
func (q *DLT) CountRange(ctx context.Context, from, to map[int32]int64) (int64, error) {
	id, err := topicID(ctx, q.adm, q.topo.DLT())
	if err != nil {
		return 0, err
	}
	spans, err := q.spans(ctx)
	if err != nil {
		return 0, err
	}
	rc := q.count
	if err := rc.lock(ctx); err != nil {
		return 0, err
	}
	defer rc.unlock()
	starts, ends := spanBounds(spans)
	if err := rc.update(ctx, id, starts, ends); err != nil {
		return 0, fmt.Errorf("kafka: count the dead letters of %q: %w", q.topo.DLT(), err)
	}
	start, end := q.bounds(spans, from, to)
	var n int64
	for p, f := range start {
		n += rc.count(p, f, end[p])
	}
	return n, nil
}

// spanBounds returns the start and end offsets of spans.
func spanBounds(spans map[int32]*span) (starts, ends map[int32]int64) {
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for p, s := range spans {
		starts[p], ends[p] = s.start, s.end
	}
	return starts, ends
}

// DeadLetter is a record of a DLT, as Peek reads it.
type DeadLetter struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       []byte `json:"key,omitempty"`
	Value     []byte `json:"value"`
	// Kind is the job kind (HeaderKind); Origin where the record was
	// first consumed (topic/partition/offset).
	Kind   string `json:"kind,omitempty"`
	Origin string `json:"origin,omitempty"`
	// Reason, Class, Error and Cause say why it died.
	Reason string `json:"reason"`
	Class  string `json:"class,omitempty"`
	Error  string `json:"error,omitempty"`
	Cause  string `json:"cause,omitempty"`
	// DeadAt is when it died; Timestamp, when it was produced to the
	// DLT.
	DeadAt    time.Time `json:"dead_at,omitzero"`
	Timestamp time.Time `json:"timestamp"`
	// Attempts is how many attempts it used; Redriven, its earlier
	// redrives.
	Attempts int `json:"attempts"`
	Redriven int `json:"redriven"`
	// History is its attempt history, oldest first (bounded: see
	// HistoryDropped).
	History        []redrive.Event `json:"history"`
	HistoryDropped int             `json:"history_dropped,omitempty"`
	// Headers are all its headers.
	Headers []kgo.RecordHeader `json:"headers,omitempty"`
	// Problem is set when redrive's headers cannot be read.
	Problem string `json:"problem,omitempty"`
	// Sealed is the key id of a value marked sealed
	// (redrive.HeaderSealed). Peek shows such a value opened when the
	// DLT's keys (SetBodies) open it; otherwise Value is the envelope as
	// the topic holds it and ValueError says why it did not open
	// ("undecryptable: ...").
	Sealed     string `json:"sealed,omitempty"`
	ValueError string `json:"value_error,omitempty"`
}

// deadLetterOf reads a DLT record.
func deadLetterOf(r *kgo.Record) DeadLetter {
	dl := DeadLetter{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: r.Headers, History: []redrive.Event{}}
	dl.Reason, _ = header(r, HeaderReason)
	dl.Class, _ = header(r, HeaderClass)
	dl.Error, _ = header(r, HeaderError)
	dl.Cause, _ = header(r, HeaderCause)
	if v, ok := header(r, HeaderDeadAt); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			dl.DeadAt = time.UnixMilli(ms)
		}
	}
	st, err := readState(r)
	if err != nil {
		dl.Problem = err.Error()
		return dl
	}
	dl.Kind, dl.Attempts, dl.Redriven, dl.HistoryDropped = st.kind, st.attempts, st.redriven, st.dropped
	if st.history != nil {
		dl.History = st.history
	}
	t, p, o := st.identity(r)
	dl.Origin = fmt.Sprintf("%s/%d/%d", t, p, o)
	return dl
}

// readStall bounds how long a read of a DLT waits for the next record
// before it fails: the broker is that slow, or the records just below
// the end belong to a transaction aborted after a later one began (the
// read then waits for the next record past the end).
var readStall = 30 * time.Second

// read calls fn on the records of the DLT from the given offsets up to
// (not including) the given ends, partition by partition in offset
// order, transaction markers included, until fn returns false or ctx
// ends. It reads committed records only (read_committed): the dead
// letters of aborted transactions never show, nor those of open ones. A
// partition is read to its end once a record (or marker) at or past its
// last offset shows; no record for readStall is an error, not an end.
func (q *DLT) read(ctx context.Context, from, to map[int32]int64, fn func(r *kgo.Record) (more bool, err error)) error {
	return readCommitted(ctx, q.opts, q.topo.DLT(), from, to, fn)
}

// readCommitted is DLT.read on any topic, with the client options opts
// (seed brokers included).
func readCommitted(ctx context.Context, opts []kgo.Opt, topic string, from, to map[int32]int64,
	fn func(r *kgo.Record) (more bool, err error)) error {
	parts := map[int32]kgo.Offset{}
	for p, f := range from {
		if f < to[p] {
			parts[p] = kgo.NewOffset().At(f)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	done := map[int32]bool{}
	last := time.Now()
	for len(done) < len(parts) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("kafka: read topic %q: %w", topic, err)
		}
		if fs.NumRecords() == 0 {
			if time.Since(last) > readStall {
				var behind []string
				for p := range parts {
					if !done[p] {
						behind = append(behind, fmt.Sprintf("partition %d (up to offset %d)", p, to[p]))
					}
				}
				sort.Strings(behind)
				return fmt.Errorf("kafka: read topic %q: no record for %v while reading %s: the broker is slow, "+
					"or a transaction is still open", topic, readStall, strings.Join(behind, ", "))
			}
			continue
		}
		last = time.Now()
		var stop bool
		var ferr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, r := range fp.Records {
				if stop || done[r.Partition] {
					continue
				}
				if r.Offset >= to[r.Partition] {
					done[r.Partition] = true
					continue
				}
				more, err := fn(r)
				if err != nil {
					stop, ferr = true, err
					return
				}
				if !more {
					stop = true
					return
				}
				if r.Offset+1 >= to[r.Partition] {
					done[r.Partition] = true
				}
			}
		})
		if ferr != nil {
			return ferr
		}
		if stop {
			return nil
		}
	}
	return nil
}

// settleBetween settles [from, to), offsets that hold no dead letter
// (transaction markers, aborted records), when that adds no range to c:
// they touch its offset or a settled range. It reports whether it did.
// Settling them after a skipped dead letter would take one of the
// cursor's maxCursorRanges ranges per transaction in exactly-once mode.
func settleBetween(c *cursor, from, to int64) bool {
	if from > c.at && !c.settled(from-1) && !c.settled(to) {
		return false
	}
	c.settle(from, to)
	return true
}

// Peek returns up to n dead letters after the redrive cursor (or, when
// from is not nil, from those offsets per partition), partition by
// partition, without moving anything. Without from, it shows the pending
// ones only: not those redriven past the dead letters a filtered redrive
// skipped.
func (q *DLT) Peek(ctx context.Context, n int, from map[int32]int64) ([]DeadLetter, error) {
	if n <= 0 || n > MaxPeek {
		return nil, fmt.Errorf("kafka: peek %d: want 1 to %d records", n, MaxPeek)
	}
	spans, err := q.spans(ctx)
	if err != nil {
		return nil, err
	}
	start, end := q.bounds(spans, from, nil)
	var out []DeadLetter
	err = q.read(ctx, start, end, func(r *kgo.Record) (bool, error) {
		if r.Attrs.IsControl() || (from == nil && spans[r.Partition].cur.settled(r.Offset)) {
			return true, nil
		}
		dl := deadLetterOf(r)
		if id, marked := header(r, redrive.HeaderSealed); marked {
			dl.Sealed = id
			if plain, err := q.bodies.Open(q.topo.Topic, r.Value, true); err != nil {
				dl.ValueError = store.ReasonUndecryptable + ": " + err.Error()
			} else {
				dl.Value = plain
			}
		}
		out = append(out, dl)
		return len(out) < n, nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, err
}

// bounds returns the offsets to read from and to, per partition: from
// (else the cursor) and to (else the end), within the partition's span.
func (q *DLT) bounds(spans map[int32]*span, from, to map[int32]int64) (map[int32]int64, map[int32]int64) {
	start, end := map[int32]int64{}, map[int32]int64{}
	for p, s := range spans {
		start[p], end[p] = s.cur.at, s.end
		if from != nil {
			f, ok := from[p]
			if !ok {
				continue // a partition not named is not read
			}
			start[p] = max(f, s.start)
		}
		if t, ok := to[p]; ok {
			end[p] = min(t, s.end)
		}
	}
	if from != nil {
		for p := range spans {
			if _, ok := from[p]; !ok {
				delete(start, p)
			}
		}
	}
	return start, end
}

// RedriveOptions select the dead letters a Redrive republishes, and how
// fast.
type RedriveOptions struct {
	// From and To bound the offsets read per partition, To excluded.
	// Default: from the redrive cursor to the end as the redrive starts;
	// with From, only the partitions it names are read, and the cursor
	// does not move.
	From, To map[int32]int64
	// Reason and Class, when set, redrive only the dead letters with
	// that reason (retries_exhausted, permanent...) or failure class;
	// the others are skipped and stay pending: Count, Peek and the next
	// redrive still see them.
	Reason, Class string
	// Discard settles the selected dead letters without republishing
	// them: the cursor moves past them, an operator's decision that they
	// will not run again (they stay in the topic until its retention).
	// Not with From.
	Discard bool
	// Max bounds the records redriven (or discarded; 0: no bound).
	Max int
	// Rate bounds the redrive in records per second (default 100;
	// negative, or faster than one a nanosecond: no bound; NaN is
	// refused; a discard is not paced).
	Rate float64
	// Note is recorded in the redriven event of each record's history.
	Note string
	// Progress, when set, is called after each record redriven (or
	// discarded) with the running total.
	Progress func(redriven int)
}

// RedriveResult says what a redrive did.
type RedriveResult struct {
	Redriven int `json:"redriven"`
	// Discarded counts the dead letters settled without a redrive
	// (RedriveOptions.Discard).
	Discarded int `json:"discarded,omitempty"`
	// Skipped counts the dead letters read that the filters left: they
	// stay pending.
	Skipped int `json:"skipped"`
}

// Redrive republishes dead letters to the main topic with their attempt
// count reset: each keeps its key, value and headers (byte-exact), loses
// its dead-letter and retry headers, and carries its history with a
// redriven event and HeaderRedriven incremented, so its handler runs
// afresh and its history shows both lives. Each is produced and
// acknowledged before the cursor moves past it (committed every 100
// records and at the end), so a crash redrives some twice and loses
// none. The cursor stops at the first dead letter the filters skip; the
// ones redriven after it are remembered in the cursor's metadata (at
// most 100 ranges per partition: a redrive that would need more stops
// with an error, before producing). It stops at ctx's end with what it
// did so far.
func (q *DLT) Redrive(ctx context.Context, o RedriveOptions) (RedriveResult, error) {
	var res RedriveResult
	if err := transport.CheckMax("kafka", o.Max); err != nil {
		return res, err
	}
	if err := transport.CheckRate("kafka", o.Rate); err != nil {
		return res, err
	}
	if o.Discard && o.From != nil {
		return res, errors.New("kafka: redrive: discard moves the redrive cursor, which a redrive from given offsets does not")
	}
	var pace *transport.Pacer // a discard is not paced
	if !o.Discard {
		pace = transport.NewPacer(o.Rate)
		defer pace.Stop()
	}
	spans, err := q.spans(ctx)
	if err != nil {
		return res, err
	}
	start, end := q.bounds(spans, o.From, o.To)
	moveCursor := o.From == nil
	pos := map[int32]int64{} // per partition, the next offset to see
	for p, f := range start {
		pos[p] = f
	}
	dirty := map[int32]bool{}
	commit := func() error {
		if !moveCursor || len(dirty) == 0 {
			return nil
		}
		offs := kadm.Offsets{}
		for p := range dirty {
			c := spans[p].cur
			offs.Add(kadm.Offset{Topic: q.topo.DLT(), Partition: p, At: c.at, LeaderEpoch: -1, Metadata: c.metadata()})
		}
		resp, err := q.adm.CommitOffsets(context.WithoutCancel(ctx), q.cursor, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: redrive: move the cursor %q: %w (the records since the last move will be redriven again by the next redrive)", q.cursor, err)
		}
		clear(dirty)
		return nil
	}
	seen := 0
	err = q.read(ctx, start, end, func(r *kgo.Record) (bool, error) {
		p := r.Partition
		var cur *cursor
		if moveCursor {
			cur = &spans[p].cur
			if cur.settled(r.Offset) && !r.Attrs.IsControl() {
				cur.settle(pos[p], r.Offset) // what the read did not show
				pos[p] = r.Offset + 1
				return true, nil // redriven past a skipped one before
			}
		}
		if r.Attrs.IsControl() {
			// A transaction marker, and the aborted records before it
			// the read did not show: no dead letters. Settled only where
			// that adds no range (see settleBetween); else pos stays
			// before them, and the next dead letter redriven settles
			// them with it.
			if cur == nil || settleBetween(cur, pos[p], r.Offset+1) {
				dirty[p] = cur != nil
				pos[p] = r.Offset + 1
			}
			return true, nil
		}
		if o.Max > 0 && res.Redriven+res.Discarded >= o.Max {
			return false, nil
		}
		dl := deadLetterOf(r)
		if (o.Reason != "" && dl.Reason != o.Reason) || (o.Class != "" && dl.Class != o.Class) {
			res.Skipped++
			if cur != nil && pos[p] < r.Offset && settleBetween(cur, pos[p], r.Offset) {
				dirty[p] = true // what the read did not show, before it
			}
			pos[p] = r.Offset + 1
			return true, nil
		}
		if cur != nil {
			next := *cur
			next.done = append([]offRange(nil), cur.done...)
			next.settle(pos[p], r.Offset+1)
			if len(next.done) > maxCursorRanges {
				return false, fmt.Errorf("kafka: redrive: %w (%d ranges in partition %d): redrive or discard the skipped ones "+
					"first, or redrive this range with From", errCursorFull, len(next.done), p)
			}
		}
		if o.Discard {
			res.Discarded++
		} else {
			if err := pace.Wait(ctx); err != nil {
				return false, err
			}
			rec := redriven(r, q.topo.Topic, dl, o.Note)
			if err := q.restoreValue(ctx, rec); err != nil {
				return false, fmt.Errorf("kafka: redrive %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			// The record keeps its trace context: its next attempts join
			// the trace it was first produced in, and the redrive's span
			// links to it.
			tc := traceOf(rec)
			pctx, span := startRedrive(ctx, q.tracer, q.topo.Topic, dl.Origin, tc)
			if tc == "" {
				InjectTrace(pctx, rec) // none to keep: its attempts join the redrive's trace
			}
			err := q.cl.ProduceSync(pctx, rec).FirstErr()
			if err != nil {
				err = fmt.Errorf("kafka: redrive %s/%d/%d to %q: %w", r.Topic, r.Partition, r.Offset, q.topo.Topic, err)
			}
			tracectx.EndSpan(span, err)
			if err != nil {
				return false, err
			}
			res.Redriven++
		}
		if o.Progress != nil {
			o.Progress(res.Redriven + res.Discarded)
		}
		if cur != nil {
			cur.settle(pos[p], r.Offset+1)
			dirty[p] = true
		}
		pos[p] = r.Offset + 1
		if seen++; seen%100 == 0 {
			if err := commit(); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if cerr := commit(); err == nil {
		err = cerr
	}
	return res, err
}

// restoreValue puts back the value of rec, a redriven dead letter whose
// value was dropped as too large (HeaderValueRef names the record that
// holds it), and drops the reference. A value that cannot be read back
// (the record is gone, the reference unreadable) is an error: the dead
// letter is not redriven without its payload.
func (q *DLT) restoreValue(ctx context.Context, rec *kgo.Record) error {
	ref, ok := header(rec, HeaderValueRef)
	if !ok || len(rec.Value) > 0 {
		return nil
	}
	topic, p, o, ok := parseValueRef(ref)
	if !ok {
		return fmt.Errorf("its value was dropped as too large, and its reference %s %q cannot be read", HeaderValueRef, ref)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(o)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, q.opts...)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, readStall)
	defer cancel()
	for {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return fmt.Errorf("its value was dropped as too large, and %s (%s) could not be read: %w", ref, HeaderValueRef, err)
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("its value was dropped as too large, and %s (%s) could not be read: %w", ref, HeaderValueRef, err)
		}
		if rs := fs.Records(); len(rs) > 0 {
			if rs[0].Offset != o {
				return fmt.Errorf("its value was dropped as too large, and %s (%s) is no longer in the topic", ref, HeaderValueRef)
			}
			rec.Value = rs[0].Value
			kept := rec.Headers[:0]
			for _, h := range rec.Headers {
				if h.Key != HeaderValueRef {
					kept = append(kept, h)
				}
			}
			rec.Headers = kept
			return nil
		}
	}
}

// parseValueRef reads a HeaderValueRef, topic/partition/offset.
func parseValueRef(ref string) (topic string, partition int32, offset int64, ok bool) {
	i := strings.LastIndexByte(ref, '/')
	if i <= 0 {
		return "", 0, 0, false
	}
	j := strings.LastIndexByte(ref[:i], '/')
	if j <= 0 {
		return "", 0, 0, false
	}
	p, err1 := strconv.ParseInt(ref[j+1:i], 10, 32)
	o, err2 := strconv.ParseInt(ref[i+1:], 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return "", 0, 0, false
	}
	return ref[:j], int32(p), o, true
}

// redriven returns the record that redrives dead letter r to its main
// topic.
func redriven(r *kgo.Record, topic string, dl DeadLetter, note string) *kgo.Record {
	set := map[string]string{HeaderRedriven: strconv.Itoa(dl.Redriven + 1)}
	drop := []string{HeaderAttempt, HeaderDue, HeaderLastDelay, HeaderReason, HeaderClass, HeaderError, HeaderCause,
		HeaderDeadAt, HeaderFirstFailure}
	if dl.Problem == "" {
		ev := store.Event{Kind: store.EventRedriven, At: time.Now(), Note: note}
		hist, dropped := carry.History(append(dl.History, ev), dl.HistoryDropped, DefaultMaxHistory, DefaultMaxHistoryBytes)
		set[HeaderHistory] = hist
		if dropped > 0 {
			set[HeaderHistoryDropped] = strconv.Itoa(dropped)
		}
	} else {
		// Unreadable redrive headers: start afresh rather than die again.
		drop = append(drop, HeaderHistory, HeaderHistoryDropped)
	}
	return forwarded(r, topic, set, drop...)
}
