package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/kafka"
)

// TestDLTCountHonoursContextWhileWaiting: a Count (or CountRange) that
// waits for another one reading the DLT through (the first Count of a
// large DLT can take minutes) returns at its context's end, instead of
// waiting for the other one to finish.
func TestDLTCountHonoursContextWhileWaiting(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	release := kafka.HoldCounter(dlt)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	for _, op := range []struct {
		name  string
		count func(ctx context.Context) error
	}{
		{"Count", func(ctx context.Context) error { _, err := dlt.Count(ctx); return err }},
		{"CountRange", func(ctx context.Context) error {
			_, err := dlt.CountRange(ctx, map[int32]int64{0: 0}, nil)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- op.count(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s while another count holds the counter: %v, want the context's deadline", op.name, err)
			}
		case <-time.After(30 * time.Second): // liveness bound
			t.Errorf("%s still waits for the other count, 30s after its context ended", op.name)
			release()
			released = true
			<-done
		}
		cancel()
	}
}

// TestDLTCountRecreatedTopic: a DLT deleted and created again (an
// operator purging it) is counted afresh by a DLT that counted it
// before, though its new offsets reach past the old ones: the counter
// does not keep where the old topic's records and markers were. (It
// counted the old positions of the records: 3 transactions of 1 dead
// letter, then 10 plain ones, counted 7.)
func TestDLTCountRecreatedTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	txn := c.client(t, kgo.TransactionalID(topic+"-txn"))
	for i := range 3 {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		c.produce(t, txn, deadLetter(topic, fmt.Sprint("old", i), "permanent"))
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := dlt.Count(ctx); err != nil || n.Total != 3 {
		t.Fatalf("count: %+v %v, want 3", n, err)
	}
	adm := kadm.NewClient(c.client(t))
	if _, err := adm.DeleteTopics(ctx, dlt.Name()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the DLT deleted", 30*time.Second, func() bool {
		listed, err := adm.ListTopics(ctx)
		return err == nil && !listed.Has(dlt.Name())
	})
	eventually(t, "the DLT created again", 30*time.Second, func() bool {
		resp, err := adm.CreateTopic(ctx, 1, -1, nil, dlt.Name())
		return err == nil && resp.Err == nil
	})
	plain := c.client(t)
	for i := range 10 {
		c.produce(t, plain, deadLetter(topic, fmt.Sprint("new", i), "permanent"))
	}
	// The topic's ID, which tells the new topic from the old one, is
	// read from metadata kgo caches for 5s.
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the last count: %s", last)
		}
	}()
	eventually(t, "the new DLT counted", 30*time.Second, func() bool {
		n, err := dlt.Count(ctx)
		last = fmt.Sprintf("%+v %v", n, err)
		return err == nil && n == kafka.DLTCount{Total: 10, Pending: 10}
	})
}

// TestDLTCountAbortedBeforeOpen: a dead letter aborted before another
// producer's transaction still open (two exactly-once consumers write
// to the same DLT partition), its abort marker after the open one's
// first record: the last stable offset stops after the aborted record
// and before its marker, so no record shows at the end of the range a
// count reads. The count is still exact, and quick.
func TestDLTCountAbortedBeforeOpen(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	c.produce(t, c.client(t), deadLetter(topic, "plain", "permanent"))
	aborted := c.client(t, kgo.TransactionalID(topic+"-aborted"))
	open := c.client(t, kgo.TransactionalID(topic+"-open"))
	for _, cl := range []*kgo.Client{aborted, open} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		c.produce(t, cl, deadLetter(topic, "txn", "permanent"))
	}
	if err := aborted.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.EndTransaction(ctx, kgo.TryAbort) }()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second) // within readStall (30s)
	defer cancel()
	if n, err := dlt.Count(cctx); err != nil || n != (kafka.DLTCount{Total: 1, Pending: 1}) {
		t.Errorf("count: %+v %v, want 1/1", n, err)
	}
}

// TestDLTCountInterleavedTransactions: random interleavings of plain
// dead letters and transactions of three producers on one DLT
// partition, committed, aborted or left open, with a Count after random
// steps, against a model: the dead letters below the last stable offset
// (the first offset of the oldest open transaction) that are plain or
// committed.
func TestDLTCountInterleavedTransactions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			topic := newTopic(t)
			c.cleanup(t, topic)
			dlt := newDLT(t, c, topic)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 36))
			type txn struct {
				cl    *kgo.Client
				open  bool
				first int64   // its first record's offset
				offs  []int64 // its records
			}
			txns := make([]*txn, 3)
			for i := range txns {
				txns[i] = &txn{cl: c.client(t, kgo.TransactionalID(fmt.Sprintf("%s-txn%d", topic, i)))}
			}
			plain := c.client(t)
			visible := map[int64]bool{} // plain and committed dead letters
			produce := func(cl *kgo.Client) int64 {
				r := deadLetter(topic, fmt.Sprint(rng.Int()), "permanent")
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
				return r.Offset
			}
			want := func() int64 {
				lso := int64(1 << 62)
				for _, x := range txns {
					if x.open {
						lso = min(lso, x.first)
					}
				}
				var n int64
				for o, v := range visible {
					if v && o < lso {
						n++
					}
				}
				return n
			}
			// A real broker writes a transaction's markers after its end
			// returns: the last stable offset moves a moment later.
			check := func(what string) {
				t.Helper()
				var last string
				w := want()
				defer func() {
					if t.Failed() {
						t.Logf("the last %s: %s", what, last)
					}
				}()
				eventually(t, fmt.Sprintf("%s %d", what, w), 30*time.Second, func() bool {
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second) // within readStall (30s)
					defer cancel()
					n, err := dlt.Count(cctx)
					last = fmt.Sprintf("%+v %v", n, err)
					return err == nil && n == kafka.DLTCount{Total: w, Pending: w}
				})
			}
			for range 60 {
				switch x := txns[rng.IntN(len(txns))]; {
				case rng.IntN(4) == 0:
					visible[produce(plain)] = true
				case !x.open:
					if err := x.cl.BeginTransaction(); err != nil {
						t.Fatal(err)
					}
					x.open, x.offs = true, nil
					x.first = produce(x.cl)
					x.offs = append(x.offs, x.first)
				case rng.IntN(3) > 0:
					x.offs = append(x.offs, produce(x.cl))
				default:
					commit := rng.IntN(2) == 0
					if err := x.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
						t.Fatal(err)
					}
					for _, o := range x.offs {
						visible[o] = commit
					}
					x.open = false
				}
				if rng.IntN(6) == 0 {
					check("count")
				}
			}
			for _, x := range txns {
				if x.open {
					if err := x.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
						t.Fatal(err)
					}
					for _, o := range x.offs {
						visible[o] = true
					}
					x.open = false
				}
			}
			check("count at the end")
			if all, err := dlt.Peek(ctx, kafka.MaxPeek, map[int32]int64{0: 0}); err != nil || int64(len(all)) != want() {
				t.Errorf("peek from the start: %d %v, want %d", len(all), err, want())
			}
		})
	}
}

// TestDLTCountAfterDeleteRecords: retention (here DeleteRecords) moving
// the DLT's start into a transaction: a DLT that counted it before
// forgets the dead letters below the new start, and counts as a new DLT
// and a read_committed reader do.
func TestDLTCountAfterDeleteRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	txn := c.client(t, kgo.TransactionalID(topic+"-txn"))
	var offs []int64 // the committed dead letters' offsets
	for i := range 4 {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			r := deadLetter(topic, fmt.Sprint(i, j), "permanent")
			c.produce(t, txn, r)
			if i != 1 {
				offs = append(offs, r.Offset)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(i != 1)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the count of 9", 30*time.Second, func() bool {
		n, err := dlt.Count(ctx)
		return err == nil && n == kafka.DLTCount{Total: 9, Pending: 9}
	})
	// The new start: the second record of the third transaction.
	start := offs[4]
	adm := kadm.NewClient(c.client(t))
	res, err := adm.DeleteRecords(ctx, kadm.Offsets{dlt.Name(): {0: {Topic: dlt.Name(), Partition: 0, At: start, LeaderEpoch: -1}}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, o := range offs {
		if o >= start {
			want++
		}
	}
	if n, err := dlt.Count(ctx); err != nil || n != (kafka.DLTCount{Total: want, Pending: want}) {
		t.Errorf("count after DeleteRecords: %+v %v, want %d", n, err, want)
	}
	fresh := newDLT(t, c, topic)
	if n, err := fresh.Count(ctx); err != nil || n.Total != want {
		t.Errorf("a new DLT's count: %+v %v, want %d", n, err, want)
	}
	if n, err := dlt.CountRange(ctx, map[int32]int64{0: 0}, nil); err != nil || n != want {
		t.Errorf("count from offset 0: %d %v, want %d", n, err, want)
	}
}
