package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/internal/transport"
)

// runExactlyOnce consumes in ExactlyOnce mode: one transactional session
// for the main topics, and one per tier delay, so that a tier waiting for
// its records' due time never holds the main topics' batches. Each
// session's group is the consumer's group, suffixed -retry-<delay> for a
// tier's. A lane that fails for good (fenced again and again) stops the
// others, and Run returns its error.
func (c *Consumer) runExactlyOnce(ctx context.Context) error {
	lanes := map[string][]string{}
	for name, ts := range c.topics {
		lanes[c.laneGroup(ts)] = append(lanes[c.laneGroup(ts)], name)
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
	laneCtx, laneCancel := context.WithCancelCause(ctx)
	defer laneCancel(nil)
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for _, g := range groups {
		wg.Go(func() {
			if err := c.eosLane(laneCtx, hardCtx, g, lanes[g]); err != nil {
				errs <- err
				laneCancel(err)
			}
		})
	}
	allDone := lifecycle.WaitGroupDone(&wg)
	select {
	case <-allDone:
	case <-laneCtx.Done():
		lifecycle.Drain(allDone, c.opts.ShutdownTimeout, func() {
			c.log.Warn("kafka: shutdown timeout: canceling running handlers")
			hardCancel(redrive.ErrShutdown)
		}, 0)
	}
	close(errs)
	var err error
	for e := range errs {
		err = errors.Join(err, e)
	}
	c.log.Info("kafka: consumer stopped", "group", c.opts.Group, "error", err)
	return err
}

// laneGroup is the consumer group of the exactly-once lane that consumes
// ts: the consumer's group for a main topic, <group>-retry-<delay> for a
// tier.
func (c *Consumer) laneGroup(ts *topicState) string {
	if ts.tier != 0 {
		return c.opts.Group + "-retry-" + tierName(ts.tier)
	}
	return c.opts.Group
}

// tierName is a tier's delay as in its topic's name: 4s, 1500ms.
func tierName(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// maxFences is how many times in a row a lane may be fenced (another
// producer took its transactional id) without committing a transaction in
// between before it stops: once is a zombie of this consumer's own past
// (a session replaced after a failure, a transaction timed out by the
// coordinator); again and again is another live consumer with the same
// transactional id, that is the same ExecutorOptions.ID.
const maxFences = 3

// errSession marks an error after which a transactional session cannot
// go on: its transaction could not be ended, or it was fenced.
var errSession = errors.New("transactional session unusable")

// eosLane runs one lane: transactional sessions over topics in group, one
// after the other, until ctx ends. A session whose transaction cannot be
// ended (a produce outage outlasting the end timeout, a fence) is closed,
// its batch consumed again by a new session after a backoff; a lane
// fenced maxFences times in a row returns the error.
func (c *Consumer) eosLane(ctx, hardCtx context.Context, group string, topics []string) error {
	fences := 0
	backoff := 0 * time.Second
	for {
		committed, err := c.eosSession(ctx, hardCtx, group, topics)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, errSession) {
			return err
		}
		if committed > 0 {
			fences, backoff = 0, 0
		}
		if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
			if fences++; fences >= maxFences {
				return fmt.Errorf("kafka: exactly-once lane %q fenced %d times in a row: another consumer uses the "+
					"transactional id %q (give each consumer its own ExecutorOptions.ID): %w", group, fences,
					c.transactionalID(group), err)
			}
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
		c.log.Error("kafka: transactional session failed; a new one consumes its batch again", "group", group,
			"backoff", backoff, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// transactionalID is the transactional id of a lane's sessions.
func (c *Consumer) transactionalID(group string) string { return group + "-" + c.exec.ID() }

// eosSession runs one transactional session over topics in group until
// ctx ends (nil) or its session cannot go on (an error wrapping
// errSession): poll a batch, handle its partitions concurrently (each in
// order), then produce what they decided and commit the batch's offsets
// in one transaction. It returns how many transactions it committed.
func (c *Consumer) eosSession(ctx, hardCtx context.Context, group string, topics []string) (int, error) {
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.TransactionalID(c.transactionalID(group)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.WithLogger(kgoLogger{c.log}),
	}, c.opts.ClientOptions...)...)
	if err != nil {
		return 0, fmt.Errorf("kafka: %w", err)
	}
	defer sess.Close()
	cl := sess.Client()
	committed := 0
	for {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return committed, nil
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("kafka: fetch error", "topic", t, "partition", p, "error", err)
		})
		var mu sync.Mutex
		var outs []produced
		var fatal error
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
					return transport.Pause(ctx, d)
				}
				hold := func(f func(context.Context)) {
					tp := map[string][]int32{fp.Topic: {fp.Partition}}
					cl.PauseFetchPartitions(tp)
					defer cl.ResumeFetchPartitions(tp)
					f(ctx)
				}
				for _, r := range fp.Records {
					if interrupted.Load() {
						return
					}
					out, ok := c.decide(hardCtx, r, ts, wait, hold)
					if !ok {
						interrupted.Store(true)
						return
					}
					if out != nil {
						pr := produced{src: r, out: out}
						if n := c.tooLargeSteps(r); n > 0 {
							small := c.smaller(ts.main, r, out, n, kerr.MessageTooLarge)
							if small == nil {
								mu.Lock()
								fatal = fmt.Errorf("kafka: record %s/%d/%d: its outcome cannot be produced, even as a dead "+
									"letter without its value: %w", r.Topic, r.Partition, r.Offset, kerr.MessageTooLarge)
								mu.Unlock()
								interrupted.Store(true)
								return
							}
							pr = produced{src: r, out: small, orig: out, main: ts.main}
						}
						mu.Lock()
						outs = append(outs, pr)
						mu.Unlock()
					}
				}
			})
		})
		wg.Wait()
		if interrupted.Load() {
			// Shutdown mid-batch: nothing of this batch counts; it is
			// consumed again.
			endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.endTimeout)
			if _, err := sess.End(endCtx, kgo.TryAbort); err != nil {
				c.log.Warn("kafka: abort failed", "group", group, "error", err)
			}
			cancel()
			return committed, fatal
		}
		ok, err := c.commitBatch(ctx, sess, outs)
		switch {
		case err != nil:
			return committed, err
		case ok:
			committed++
		}
	}
}

// commitBatch produces outs and commits the polled offsets in one
// transaction. It returns whether the transaction committed; a batch not
// committed is consumed again by the same session (the session rewinds
// to its committed offsets), unless the error wraps errSession: the
// transaction could not be ended, and the session must be replaced.
func (c *Consumer) commitBatch(ctx context.Context, sess *kgo.GroupTransactSession, outs []produced) (bool, error) {
	if err := sess.Begin(); err != nil {
		return false, c.unusable(fmt.Errorf("kafka: %w: begin: %w", errSession, err))
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.endTimeout)
	defer cancel()
	var failed atomic.Value
	// The client batches the records of a partition: a batch refused as
	// too large says nothing of each record in it. After such a refusal,
	// the batch consumed again produces its records one at a time, and
	// only a record refused alone is produced smaller.
	alone := len(outs) == 1 || c.suspectTooLarge(outs)
	for _, p := range outs {
		if alone && failed.Load() != nil {
			break // aborted: the rest is not produced
		}
		done := make(chan struct{})
		sess.Produce(pctx, p.out, func(_ *kgo.Record, err error) {
			defer close(done)
			if err != nil {
				failed.CompareAndSwap(nil, err)
				if tooLarge(err) {
					// Consumed again, its outcome is produced
					// smaller, or alone first.
					c.refusedTooLarge(p.src, alone)
				}
			}
		})
		if alone {
			select {
			case <-done:
			case <-pctx.Done():
			}
		}
	}
	try := kgo.TryCommit
	if err := sess.Client().Flush(pctx); err != nil || failed.Load() != nil {
		try = kgo.TryAbort
	}
	// Ending gets its own time: a produce outage that used up the
	// produce's must not keep the abort from being sent.
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), c.endTimeout)
	defer ecancel()
	committed, err := sess.End(ectx, try)
	switch {
	case err != nil:
		return false, c.unusable(fmt.Errorf("kafka: %w: end: %w", errSession, err))
	case failed.Load() != nil:
		c.log.Warn("kafka: transaction aborted; its batch is consumed again", "error", failed.Load())
	case try == kgo.TryAbort:
		c.log.Warn("kafka: transaction aborted (its produces did not complete in time); its batch is consumed again")
	case !committed:
		c.log.Warn("kafka: transaction aborted (a rebalance revoked the batch's partitions, or its offsets could not " +
			"be committed); its batch is consumed again")
	default:
		srcs := make([]*kgo.Record, len(outs))
		for i, p := range outs {
			srcs[i] = p.src
			if p.orig != nil {
				madeDead(p.main, p.orig, p.out)
			}
		}
		c.settledTooLarge(srcs)
	}
	return committed, nil
}

// unusable returns err, an error that makes a session unusable, calling
// the test hook sessionFailed with it first.
func (c *Consumer) unusable(err error) error {
	if c.sessionFailed != nil {
		c.sessionFailed(err)
	}
	return err
}

// produced is a record an outcome produces, and the polled record whose
// outcome it is; for a smaller form (see smaller), orig is the outcome's
// own record and main its main topic.
type produced struct {
	src, out, orig *kgo.Record
	main           *mainTopic
}
