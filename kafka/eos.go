package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
)

// runExactlyOnce consumes in ExactlyOnce mode: one transactional session
// for the main topics, and one per tier delay, so that a tier waiting for
// its records' due time never holds the main topics' batches. Each
// session's group is the consumer's group, suffixed -retry-<delay> for a
// tier's.
func (c *Consumer) runExactlyOnce(ctx context.Context) error {
	lanes := map[string][]string{}
	for name, ts := range c.topics {
		group := c.opts.Group
		if ts.tier != 0 {
			group += "-retry-" + tierName(ts.tier)
		}
		lanes[group] = append(lanes[group], name)
	}
	groups := make([]string, 0, len(lanes))
	for g := range lanes {
		groups = append(groups, g)
		sort.Strings(lanes[g])
	}
	sort.Strings(groups)
	c.log.Info("kafka: consumer starting", "group", c.opts.Group, "mode", ExactlyOnce.String(), "sessions", len(groups),
		"kinds", c.exec.Kinds())
	hardCtx, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardCancel(nil)
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for _, g := range groups {
		wg.Go(func() {
			if err := c.eosLane(ctx, hardCtx, g, lanes[g]); err != nil {
				errs <- err
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-ctx.Done():
		t := time.NewTimer(c.opts.ShutdownTimeout)
		select {
		case <-allDone:
			t.Stop()
		case <-t.C:
			c.log.Warn("kafka: shutdown timeout: canceling running handlers")
			hardCancel(redrive.ErrShutdown)
			<-allDone
		}
	}
	close(errs)
	var err error
	for e := range errs {
		err = errors.Join(err, e)
	}
	c.log.Info("kafka: consumer stopped", "group", c.opts.Group, "error", err)
	return err
}

// tierName is a tier's delay as in its topic's name: 4s, 1500ms.
func tierName(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// eosLane runs one transactional session over topics in group until ctx
// ends: poll a batch, handle its partitions concurrently (each in
// order), then produce what they decided and commit the batch's offsets
// in one transaction.
func (c *Consumer) eosLane(ctx, hardCtx context.Context, group string, topics []string) error {
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.TransactionalID(group + "-" + c.exec.ID()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.WithLogger(kgoLogger{c.log}),
	}, c.opts.ClientOptions...)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer sess.Close()
	cl := sess.Client()
	for {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("kafka: fetch error", "topic", t, "partition", p, "error", err)
		})
		var mu sync.Mutex
		var outs []*kgo.Record
		var interrupted atomic.Bool
		var wg sync.WaitGroup
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			ts := c.topics[fp.Topic]
			if ts == nil || len(fp.Records) == 0 {
				return
			}
			ts.main.stats.consumed.Add(int64(len(fp.Records)))
			wg.Go(func() {
				wait := func(d time.Duration) bool {
					tp := map[string][]int32{fp.Topic: {fp.Partition}}
					cl.PauseFetchPartitions(tp)
					defer cl.ResumeFetchPartitions(tp)
					t := time.NewTimer(d)
					defer t.Stop()
					select {
					case <-t.C:
						return true
					case <-ctx.Done():
						return false
					}
				}
				for _, r := range fp.Records {
					if interrupted.Load() {
						return
					}
					out, ok := c.decide(hardCtx, r, ts, wait)
					if !ok {
						interrupted.Store(true)
						return
					}
					if out != nil {
						mu.Lock()
						outs = append(outs, out)
						mu.Unlock()
					}
				}
			})
		})
		wg.Wait()
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if interrupted.Load() {
			// Shutdown mid-batch: nothing of this batch counts; it is
			// consumed again.
			if _, err := sess.End(endCtx, kgo.TryAbort); err != nil {
				c.log.Warn("kafka: abort failed", "group", group, "error", err)
			}
			cancel()
			break
		}
		if err := c.commitBatch(endCtx, sess, outs); err != nil {
			c.log.Warn("kafka: transaction aborted; the batch will be consumed again", "group", group, "error", err)
		}
		cancel()
	}
	return nil
}

// commitBatch produces outs and commits the polled offsets in one
// transaction.
func (c *Consumer) commitBatch(ctx context.Context, sess *kgo.GroupTransactSession, outs []*kgo.Record) error {
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var failed atomic.Value
	for _, r := range outs {
		sess.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, err)
			}
		})
	}
	try := kgo.TryCommit
	if err := sess.Client().Flush(ctx); err != nil || failed.Load() != nil {
		try = kgo.TryAbort
	}
	committed, err := sess.End(ctx, try)
	switch {
	case err != nil:
		return fmt.Errorf("end: %w", err)
	case failed.Load() != nil:
		return fmt.Errorf("produce: %v", failed.Load())
	case !committed:
		return errors.New("not committed: a rebalance revoked the batch's partitions, or its offsets could not be committed")
	}
	return nil
}
