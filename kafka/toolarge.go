package kafka

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// ReasonTooLarge is the reason of a dead letter whose retry (or whose
// dead letter with its history) the broker refused as too large: the
// record grew past the topic's max.message.bytes once redrive's headers
// were added.
const ReasonTooLarge = "too_large"

// HeaderValueRef replaces the value of a dead letter too large to carry
// it: where the record's value is, topic/partition/offset, as long as the
// topic retains it.
const HeaderValueRef = "x-redrive-value-ref"

// tooLarge reports whether a produce failed because the record is too
// large for the topic: trying again cannot succeed.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// smaller returns the n-th smaller form of out, the record src's outcome
// produces, for a broker that refused the forms before it as too large:
// each step applies the next of these that changes something: the
// history dropped (its events counted in HeaderHistoryDropped); a dead
// letter of reason ReasonTooLarge instead of a retry; the value replaced
// by HeaderValueRef. nil: nothing smaller is left. A retry made a dead
// letter is counted dead by the caller once produced (see madeDead).
func (c *Consumer) smaller(m *mainTopic, src, out *kgo.Record, n int, cause error) *kgo.Record {
	steps := []func(*kgo.Record) *kgo.Record{
		func(r *kgo.Record) *kgo.Record { // the history
			v, ok := header(r, HeaderHistory)
			if !ok || v == "[]" {
				return nil
			}
			st, err := readState(r)
			dropped := 0
			if err == nil {
				dropped = st.dropped + len(st.history)
			}
			return forwarded(r, r.Topic, map[string]string{HeaderHistory: "[]", HeaderHistoryDropped: strconv.Itoa(dropped)})
		},
		func(r *kgo.Record) *kgo.Record { // a dead letter
			if r.Topic == m.topo.DLT() {
				return nil
			}
			o := &redrive.Outcome{Kind: store.Bury, At: time.Now(), Class: failure.Permanent, DeadReason: ReasonTooLarge,
				Error: fmt.Sprintf("produce to %s: %v", r.Topic, cause)}
			set := deadHeaders(o)
			if _, ok := header(r, HeaderOriginTopic); !ok {
				set[HeaderOriginTopic], set[HeaderOriginPartition], set[HeaderOriginOffset] = src.Topic,
					strconv.Itoa(int(src.Partition)), strconv.FormatInt(src.Offset, 10)
			}
			return forwarded(r, m.topo.DLT(), set, HeaderDue, HeaderLastDelay)
		},
		func(r *kgo.Record) *kgo.Record { // the value
			if len(r.Value) == 0 {
				return nil
			}
			ref := fmt.Sprintf("%s/%d/%d", src.Topic, src.Partition, src.Offset)
			out := forwarded(r, r.Topic, map[string]string{HeaderValueRef: ref})
			out.Value = nil
			return out
		},
	}
	want, cur := n, out
	for _, step := range steps {
		if n == 0 {
			break
		}
		if next := step(cur); next != nil {
			cur = next
			n--
		}
	}
	if n > 0 {
		return nil
	}
	if cur != out {
		c.log.Warn("kafka: record too large for its topic; produced smaller", "topic", cur.Topic, "from_topic", src.Topic,
			"partition", src.Partition, "offset", src.Offset, "step", want, "error", cause)
	}
	return cur
}

// srcKey names a polled record.
type srcKey struct {
	topic     string
	partition int32
	offset    int64
}

// tooLargeSteps returns how many times the outcome of src was refused as
// too large (in exactly-once mode, where the batch is consumed again).
func (c *Consumer) tooLargeSteps(src *kgo.Record) int {
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	return c.shrink[srcKey{src.Topic, src.Partition, src.Offset}]
}

// refusedTooLarge counts a refusal of src's outcome as too large when it
// was produced alone; else src is only suspect: the batch it was in was
// refused (see suspectTooLarge).
func (c *Consumer) refusedTooLarge(src *kgo.Record, alone bool) {
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	k := srcKey{src.Topic, src.Partition, src.Offset}
	if !alone {
		if c.suspect == nil {
			c.suspect = map[srcKey]bool{}
		}
		c.suspect[k] = true
		return
	}
	if c.shrink == nil {
		c.shrink = map[srcKey]int{}
	}
	c.shrink[k]++
}

// suspectTooLarge reports whether the outcome of a record of outs was in
// a batch refused as too large, and has not been produced alone since.
func (c *Consumer) suspectTooLarge(outs []produced) bool {
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	for _, p := range outs {
		if c.suspect[srcKey{p.src.Topic, p.src.Partition, p.src.Offset}] {
			return true
		}
	}
	return false
}

// settledTooLarge forgets the refusals of srcs, whose outcomes were
// committed.
func (c *Consumer) settledTooLarge(srcs []*kgo.Record) {
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	for _, src := range srcs {
		delete(c.shrink, srcKey{src.Topic, src.Partition, src.Offset})
		delete(c.suspect, srcKey{src.Topic, src.Partition, src.Offset})
	}
}

// madeDead counts a dead record of m when small, a smaller form of out
// that was produced, is a dead letter that out was not.
func madeDead(m *mainTopic, out, small *kgo.Record) {
	if small.Topic == m.topo.DLT() && out.Topic != small.Topic {
		m.stats.dead.Add(1)
	}
}
