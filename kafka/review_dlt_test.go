package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/kafka"
)

// TestDLTFilteredRedriveTransactionMarkers: in exactly-once mode each
// dead letter of a DLT is followed by its transaction's marker. A
// filtered redrive that skips them all must leave the DLT readable:
// Count, Peek and the next redrive still work and see every skipped dead
// letter. (Each marker after a skipped dead letter was settled as a range
// of its own, unchecked against the cursor's bound: the cursor was
// committed with more ranges than it reads back, and every later Count,
// Peek and Redrive of the DLT failed.)
func TestDLTFilteredRedriveTransactionMarkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	const n = 120
	cl := c.client(t, kgo.TransactionalID(topic+"-eos"))
	for i := range n {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, deadLetter(topic, fmt.Sprint(i), "permanent")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	c.waitStable(t, topic+"-dlt")
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1})
	if err != nil || res.Redriven != 0 || res.Skipped != n {
		t.Fatalf("filtered redrive: %+v %v, want %d skipped", res, err, n)
	}
	if got, err := dlt.Count(ctx); err != nil || got != (kafka.DLTCount{Total: n, Pending: n}) {
		t.Errorf("count after the filtered redrive: %+v %v, want the %d dead letters, all pending", got, err, n)
	}
	if dead, err := dlt.Peek(ctx, 10, nil); err != nil || len(dead) != 10 {
		t.Errorf("peek after the filtered redrive: %d %v, want 10", len(dead), err)
	}
	res, err = dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != n {
		t.Errorf("unfiltered redrive: %+v %v, want the %d skipped", res, err, n)
	}
}

// TestDLTRedriveModel: random sequences of dead letters (plain, in
// committed transactions, in aborted ones) and redrives (filtered by
// reason, bounded by Max, discarding), each checked against a model of
// the contract: a redrive takes the pending dead letters in order, the
// filters skip and keep the others pending, and each dead letter is
// redriven (or discarded) at most once; Peek shows exactly the pending
// ones, and Count counts them, and every committed dead letter, exactly.
func TestDLTRedriveModel(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			topic := newTopic(t)
			c.cleanup(t, topic)
			dlt := newDLT(t, c, topic)
			ctx := context.Background()
			plain := c.client(t)
			txn := c.client(t, kgo.TransactionalID(topic+"-txn"))
			type letter struct {
				key, reason string
				settled     bool
			}
			var model []*letter
			redriven := map[string]int{}
			seq := 0
			reasons := []string{"retries_exhausted", "permanent"}
			for step := range 14 {
				switch op := rng.IntN(3); {
				case op == 0 || step < 2: // dead letters
					n := 1 + rng.IntN(4)
					var rs []*kgo.Record
					var ls []*letter
					for range n {
						seq++
						l := &letter{key: fmt.Sprintf("k%d", seq), reason: reasons[rng.IntN(2)]}
						ls = append(ls, l)
						rs = append(rs, deadLetter(topic, l.key, l.reason))
					}
					switch rng.IntN(3) {
					case 0:
						c.produce(t, plain, rs...)
						model = append(model, ls...)
					default:
						commit := rng.IntN(3) > 0
						if err := txn.BeginTransaction(); err != nil {
							t.Fatal(err)
						}
						c.produce(t, txn, rs...)
						end := kgo.TryAbort
						if commit {
							end = kgo.TryCommit
							model = append(model, ls...)
						}
						if err := txn.EndTransaction(ctx, end); err != nil {
							t.Fatal(err)
						}
						c.waitStable(t, topic+"-dlt")
					}
				default: // a redrive
					o := kafka.RedriveOptions{Rate: -1, Discard: rng.IntN(4) == 0}
					if rng.IntN(2) == 0 {
						o.Reason = reasons[rng.IntN(2)]
					}
					if rng.IntN(3) == 0 {
						o.Max = 1 + rng.IntN(3)
					}
					var want kafka.RedriveResult
					for _, l := range model {
						if l.settled {
							continue
						}
						if o.Max > 0 && want.Redriven+want.Discarded >= o.Max {
							break
						}
						if o.Reason != "" && l.reason != o.Reason {
							want.Skipped++
							continue
						}
						l.settled = true
						if o.Discard {
							want.Discarded++
						} else {
							want.Redriven++
							redriven[l.key]++
						}
					}
					got, err := dlt.Redrive(ctx, o)
					if err != nil || got != want {
						t.Fatalf("step %d: redrive %+v: %+v %v, want %+v", step, o, got, err, want)
					}
				}
				var pending []string
				for _, l := range model {
					if !l.settled {
						pending = append(pending, l.key)
					}
				}
				dead, err := dlt.Peek(ctx, kafka.MaxPeek, nil)
				if err != nil || !slices.Equal(keys(dead), pending) {
					t.Fatalf("step %d: peek %v %v, want %v", step, keys(dead), err, pending)
				}
				want := kafka.DLTCount{Total: int64(len(model)), Pending: int64(len(pending))}
				if n, err := dlt.Count(ctx); err != nil || n != want {
					t.Fatalf("step %d: count %+v %v, want %+v", step, n, err, want)
				}
			}
			total := 0
			for k, n := range redriven {
				if n != 1 {
					t.Fatalf("%s redriven %d times", k, n)
				}
				total++
			}
			// The redrives produced synchronously, and nothing else
			// produces to the main topic: it is read to its end.
			back := c.readToEnd(t, topic)
			if len(back) != total {
				t.Fatalf("the main topic holds %d records, want the %d redriven once each", len(back), total)
			}
			for _, r := range back {
				if redriven[string(r.Key)] != 1 {
					t.Fatalf("%s in the main topic, not redriven", r.Key)
				}
			}
		})
	}
}

// TestDLTRedriveValueDropped: a dead letter whose value was dropped as
// too large (x-redrive-value-ref names where the value is) is redriven
// with its value, read back from the record named, not as an empty
// record whose handler would run on an empty payload; when that record
// is gone, the redrive stops with an error and the dead letter stays
// pending.
func TestDLTRedriveValueDropped(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	cl := c.client(t)
	orig, _ := kafka.NewRecord(topic, "job", json.RawMessage(`{"big":"payload"}`), []byte("k"))
	c.produce(t, cl, orig)
	dl := deadLetter(topic, "k", kafka.ReasonTooLarge)
	dl.Value = nil
	dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: kafka.HeaderValueRef, Value: []byte(fmt.Sprintf("%s/%d/%d", topic, orig.Partition, orig.Offset))})
	gone := deadLetter(topic, "gone", kafka.ReasonTooLarge)
	gone.Value = nil
	gone.Headers = append(gone.Headers, kgo.RecordHeader{Key: kafka.HeaderValueRef, Value: []byte(topic + "/0/999")})
	c.produce(t, cl, dl, gone)
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	back := c.readCommitted(t, topic, 2)
	if string(back[1].Value) != `{"big":"payload"}` {
		t.Errorf("redriven with value %q, want the original's", back[1].Value)
	}
	if err == nil || res.Redriven != 1 {
		t.Errorf("redrive: %+v %v, want 1 redriven, then an error for the dead letter whose value is gone", res, err)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Pending != 1 {
		t.Errorf("count: %+v %v, want the one whose value is gone pending", n, err)
	}
}
