package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
)

// offsetModel is the at-least-once offset contract of the main topic:
// a record is settled once its handler completed it, or its retry or dead
// letter was produced; the offset committed on a partition never passes
// a record not settled.
type offsetModel struct {
	mu        sync.Mutex
	completed map[[2]int64]bool // partition, offset: a handler returned nil
	forwarded map[[2]int64]bool // a retry or dead letter of it was produced
	dead      map[[2]int64]bool // its dead letter was produced
	// readUpTo is, per tier or DLT partition, the offset read to.
	readUpTo map[[2]string]int64
}

func (m *offsetModel) complete(k [2]int64) {
	m.mu.Lock()
	m.completed[k] = true
	m.mu.Unlock()
}

// origin is the main topic's partition and offset a record comes from.
func origin(r *kgo.Record) [2]int64 {
	if p := header(r, kafka.HeaderOriginPartition); p != "" {
		pn, _ := strconv.ParseInt(p, 10, 64)
		on, _ := strconv.ParseInt(header(r, kafka.HeaderOriginOffset), 10, 64)
		return [2]int64{pn, on}
	}
	return [2]int64{int64(r.Partition), r.Offset}
}

// TestOffsetContractRandomized runs random outcomes (complete, retry,
// dead, Goexit, panic, slow), a small read-ahead (pauses and their
// grace), and random restarts of the consumer and members joining and
// leaving its group (revokes), and checks, each time it reads the
// group's committed offsets, that every main record before them is
// settled in the model (its completion seen, or its retry or dead letter
// readable on the broker); in the end every record completed or is dead.
func TestOffsetContractRandomized(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	const parts, n = 3, 300
	rg := newRig(t, c, parts)
	m := &offsetModel{completed: map[[2]int64]bool{}, forwarded: map[[2]int64]bool{}, dead: map[[2]int64]bool{},
		readUpTo: map[[2]string]int64{}}
	// Each record's behaviour, by its payload.
	behaviour := make([]int, n)
	for i := range behaviour {
		behaviour[i] = rnd.IntN(100)
	}
	var goexits, panics atomic.Int64
	var runs atomic.Int64 // handler runs, by every member
	// On kfake, one in three produces to the tiers fails (retriable):
	// the produces of retries take a while, and a record marked before
	// its retry was produced is committed meanwhile.
	var refused atomic.Int64
	if c.fake != nil {
		tierNames, tierIDs := rg.tierTopics(t)
		var seen atomic.Int64
		c.fake.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			req := kr.(*kmsg.ProduceRequest)
			for _, rt := range req.Topics {
				if !tierNames[rt.Topic] && !tierIDs[rt.TopicID] {
					return nil, nil, false
				}
			}
			if seen.Add(1)%3 != 0 {
				return nil, nil, false
			}
			c.fake.KeepControl()
			refused.Add(1)
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = kerr.NotEnoughReplicas.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
	}
	newConsumer := func() *kafka.Consumer {
		p := rg.policy
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: rg.group,
			Topics: map[string]kafka.TopicOptions{rg.topic: {Partitions: parts}},
			Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t),
				DisableRetryBudget: true},
			ShutdownTimeout: 5 * time.Second, MaxReadAhead: 4,
			// A refused produce is retried after a metadata refresh.
			ClientOptions: []kgo.Opt{kgo.MetadataMinAge(50 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
			r, _ := kafka.RecordOf(ctx)
			i, _ := strconv.Atoi(string(j.Payload))
			b := behaviour[i]
			runs.Add(1)
			if b%7 == 0 {
				// A handler that yields: other goroutines (the poll loop,
				// a rebalance) run while it works.
				for range b%3 + 1 {
					runtime.Gosched()
				}
			}
			if j.Attempt == 1 {
				switch {
				case b < 15:
					return errors.New("retry me")
				case b < 25:
					return redrive.Permanent(errors.New("dead"))
				case b < 30:
					goexits.Add(1)
					runtime.Goexit()
				case b < 35:
					panics.Add(1)
					panic("handler panics")
				}
			}
			m.complete(origin(r))
			return nil
		})
		return cons
	}

	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rs := make([]*kgo.Record, n)
	for i := range n {
		r, _ := kafka.NewRecord(rg.topic, "job", i, nil)
		r.Partition = int32(i % parts)
		rs[i] = r
	}

	// The reader of the tiers and the DLT: the model's forwarded records.
	var outTopics []string
	for _, d := range rg.topo.Tiers {
		outTopics = append(outTopics, rg.topo.TierTopic(d))
	}
	outTopics = append(outTopics, rg.topo.DLT())
	reader := c.client(t, kgo.ConsumeTopics(outTopics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	readTo := func(ctx context.Context, ends kadm.ListedOffsets) error {
		for {
			caught := true
			m.mu.Lock()
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset > 0 && m.readUpTo[[2]string{o.Topic, strconv.Itoa(int(o.Partition))}] < o.Offset {
					caught = false
				}
			})
			m.mu.Unlock()
			if caught {
				return nil
			}
			fs := reader.PollFetches(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				k := origin(r)
				m.forwarded[k] = true
				if r.Topic == rg.topo.DLT() {
					m.dead[k] = true
				}
				tp := [2]string{r.Topic, strconv.Itoa(int(r.Partition))}
				m.readUpTo[tp] = max(m.readUpTo[tp], r.Offset+1)
			})
			m.mu.Unlock()
		}
	}

	// check reads the committed offsets, then the ends of the tiers and
	// DLT (every produce acknowledged before the commit is below them),
	// and checks the contract.
	var violations []string
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		committed, err := rg.adm.FetchOffsets(ctx, rg.group)
		if err != nil {
			return
		}
		ends, err := rg.adm.ListEndOffsets(ctx, outTopics...)
		if err != nil || ends.Error() != nil {
			return
		}
		if err := readTo(ctx, ends); err != nil {
			t.Errorf("reading the tiers and the DLT: %v", err)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for p := range int64(parts) {
			o, ok := committed.Lookup(rg.topic, int32(p))
			if !ok || o.Err != nil {
				continue
			}
			for off := range o.At {
				k := [2]int64{p, off}
				if !m.completed[k] && !m.forwarded[k] {
					violations = append(violations, fmt.Sprintf("%d/%d committed (at %d) before it was settled", p, off, o.At))
				}
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type member struct {
		stop func()
	}
	start := func() member {
		cons := newConsumer()
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cons.Run(rctx) }()
		var once sync.Once
		return member{stop: func() {
			once.Do(func() {
				rcancel()
				// Stopped while it starts: its Ensure is canceled.
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("consumer.Run: %v", err)
				}
			})
		}}
	}
	members := []member{start()}
	defer func() {
		for _, mb := range members {
			mb.stop()
		}
	}()
	c.produce(t, cl, rs[:n/2]...)
	produced := false
	var target int64
	for step := 0; step < 12; step++ {
		// Records are handled between the changes of membership: the
		// change comes once 5 to 25 more handler runs than the last one
		// waited for happened (none waited if the handlers are ahead).
		// Counted from the start, so that they never wait for more runs
		// than the records give: 5 changes of at most 25 before the
		// second half is produced (150 records), 12 in all (300).
		target += int64(5 + rnd.IntN(21))
		testwait.Watch(t, fmt.Sprintf("%d handler runs before membership change %d", target, step), 60*time.Second,
			func() (bool, string) {
				got := runs.Load()
				return got >= target, fmt.Sprintf("%d runs", got)
			})
		check()
		switch a := rnd.IntN(4); {
		case a == 0 && len(members) < 3:
			members = append(members, start())
		case a == 1 && len(members) > 1:
			i := rnd.IntN(len(members))
			members[i].stop()
			members = append(members[:i], members[i+1:]...)
		case a == 2:
			members[0].stop()
			members[0] = start()
		}
		if step == 4 && !produced {
			c.produce(t, cl, rs[n/2:]...)
			produced = true
		}
	}
	if !produced {
		c.produce(t, cl, rs[n/2:]...)
	}
	testwait.Watch(t, "every record completed or dead (none lost) and the group settled", 90*time.Second, func() (bool, string) {
		check()
		m.mu.Lock()
		left := 0
		for p := range int64(parts) {
			for off := range int64(n / parts) {
				k := [2]int64{p, off}
				if !m.completed[k] && !m.dead[k] {
					left++
				}
			}
		}
		m.mu.Unlock()
		if left > 0 {
			return false, fmt.Sprintf("%d records neither completed nor dead (lost?), goexits %d panics %d", left, goexits.Load(), panics.Load())
		}
		ok, why := rg.settled(t)
		return ok, why
	})
	if len(violations) > 0 {
		t.Errorf("%d contract violations, e.g. %v", len(violations), violations[:min(5, len(violations))])
	}
	t.Logf("goexits %d, panics %d, tier produces refused %d", goexits.Load(), panics.Load(), refused.Load())
}
