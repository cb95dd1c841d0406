package redrive_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The fan-out/fan-in benchmarks of issue 32. Each round runs, in one
// worker (100 handlers on the dependencies' queue, defaults otherwise),
// the same number of no-op jobs in five phases, in ABBA order over the
// rounds (in order in rounds 0 and 3 of every 4, reversed in 1 and 2):
//
//   - plain: independent jobs, enqueued 10 a call with the workers
//     running (overlapped: the burn-down starts with the first job
//     enqueued, so it measures the enqueue as much as the run);
//   - workflow: the same jobs as the dependencies of workflows that
//     each fan into one final job (in a queue of its own), overlapped,
//     one EnqueueWorkflow a workflow;
//   - batch: the same workflows, overlapped, 50 a call
//     (EnqueueWorkflows);
//   - held-plain, held-workflow: the burn-down of work waiting, the
//     issue's goal: the dependencies' queue paused, every job enqueued
//     (independent jobs 10 a call, workflows 50 a call), the queue
//     resumed.
//
// It reports:
//
//   - final-p50-ms, final-p99-ms (the workflow phase), held-final-p99-ms
//     (held-workflow): how long after the last of its dependencies'
//     handlers returned a workflow's final job's handler started (the
//     outcome's batching and commit, the release, the wake-up and the
//     fetch), over every workflow of every round;
//   - PHASE-jobs/s: each phase's burn-down, from the first start of a
//     handler to the moment the store counts its jobs completed, and
//     PHASE-enqueue-ms, its enqueue calls' time in a round (mean);
//   - workflow/plain, batch/plain (overlapped) and held-workflow/plain:
//     the ratios of the burn-downs (the goal: held-workflow/plain
//     at least 0.7).
//
// BenchmarkWorkflowFanIn is one workflow of 10,000 jobs fanning into one;
// BenchmarkWorkflowsConcurrent is 1,000 workflows of 9 jobs fanning into
// a tenth. Both run on SQLite, and on PostgreSQL when
// REDRIVE_POSTGRES_URL is set. See docs/BENCHMARKS.md for the figures.

func BenchmarkWorkflowFanIn(b *testing.B) {
	benchWorkflowStores(b, 1, 10_000)
}

func BenchmarkWorkflowsConcurrent(b *testing.B) {
	benchWorkflowStores(b, 1_000, 9)
}

func benchWorkflowStores(b *testing.B, flows, width int) {
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchWorkflows(b, st, flows, width)
	})
	b.Run("postgres", func(b *testing.B) {
		url := os.Getenv(pgURLEnv)
		if url == "" {
			b.Skip(pgURLEnv + " is not set")
		}
		schema := fmt.Sprintf("redrive_wfbench_%d", os.Getpid())
		st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			st.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			st.Close()
		}()
		benchWorkflows(b, st, flows, width)
	})
}

// wfBenchStep is the payload of the benchmarks' jobs: which workflow of
// the round the job belongs to (-1: an independent job).
type wfBenchStep struct {
	Flow int `json:"f"`
}

// wfBenchRound is what the handlers record during one round.
type wfBenchRound struct {
	lastDep []atomic.Int64 // per workflow: the latest return of a dependency's handler (UnixNano)
	final   []atomic.Int64 // per workflow: the start of its final job's handler (UnixNano)
	finals  sync.WaitGroup
}

func benchWorkflows(b *testing.B, st store.Store, flows, width int) {
	ctx := context.Background()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(c, redrive.WorkerOptions{
		Queues: map[string]int{"deps": 100, "final": 10}, Logger: quietLogger(), CompletedRetention: 24 * time.Hour,
	})
	var round atomic.Pointer[wfBenchRound]
	var firstStart atomic.Int64        // the first start of a handler of the phase (UnixNano)
	var handled atomic.Int64           // the dependencies' handlers returned, over the phases
	returned := make(chan struct{}, 1) // a handler returned since the last look
	redrive.Handle(w, "dep", func(ctx context.Context, j *redrive.Job, s wfBenchStep) error {
		defer func() {
			handled.Add(1)
			select {
			case returned <- struct{}{}:
			default:
			}
		}()
		firstStart.CompareAndSwap(0, time.Now().UnixNano())
		if s.Flow >= 0 {
			r := round.Load()
			now := time.Now().UnixNano()
			for last := &r.lastDep[s.Flow]; ; {
				old := last.Load()
				if old >= now || last.CompareAndSwap(old, now) {
					break
				}
			}
		}
		return nil
	})
	redrive.Handle(w, "final", func(ctx context.Context, j *redrive.Job, s wfBenchStep) error {
		r := round.Load()
		if r.final[s.Flow].CompareAndSwap(0, time.Now().UnixNano()) {
			r.finals.Done()
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			b.Error(err)
		}
	}()

	n := int64(flows * width)
	// completedBy waits until the store counts want jobs completed in the
	// dependencies' queue. It asks the store only once the handlers have
	// returned want times: a count of the queue's completed jobs every
	// millisecond during the burn-down took half the process's CPU on
	// SQLite, from the handlers, and more in the phase that ran second
	// (its count reads the first phase's completed jobs too).
	completedBy := func(want int64) time.Time {
		for handled.Load() < want {
			<-returned
		}
		for {
			got, err := c.Count(ctx, redrive.Filter{Queue: "deps", States: []redrive.State{redrive.Completed}})
			if err != nil {
				b.Fatal(err)
			}
			if got >= want {
				return time.Now()
			}
			time.Sleep(time.Millisecond) // polling the store: no signal says "all completed"
		}
	}
	done := int64(0)
	// A phase enqueues its jobs, with the workers running (overlapped:
	// the burn-down starts with the first job enqueued, and measures the
	// enqueue as much as the run) or held back (the dependencies' queue
	// paused during the enqueue, resumed once every job is in: the
	// burn-down of work waiting, which the goal names), and
	// times the burn-down from the first start of a handler to the
	// store's count of every job completed.
	type phase struct {
		name      string
		workflows bool
		batch     int // workflows a call (0: one EnqueueWorkflow each)
		held      bool
		took, enq time.Duration
		latencies []time.Duration
	}
	phases := []*phase{
		{name: "plain"},
		{name: "workflow", workflows: true},
		{name: "batch", workflows: true, batch: 50},
		{name: "held-plain", held: true},
		{name: "held-workflow", workflows: true, batch: 50, held: true},
	}
	run := func(p *phase) {
		if p.held {
			if _, err := c.PauseQueue(ctx, "deps"); err != nil {
				b.Fatal(err)
			}
		}
		var r *wfBenchRound
		firstStart.Store(0)
		var start time.Time
		if !p.workflows {
			reqs := make([]redrive.Request, width)
			for i := range reqs {
				reqs[i] = redrive.Request{Kind: "dep", Queue: "deps", Payload: wfBenchStep{Flow: -1}}
			}
			start = time.Now()
			for range flows {
				if _, err := c.EnqueueMany(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
		} else {
			r = &wfBenchRound{lastDep: make([]atomic.Int64, flows), final: make([]atomic.Int64, flows)}
			r.finals.Add(flows)
			round.Store(r)
			wfs := make([]*redrive.Workflow, flows)
			for f := range wfs {
				wf := redrive.NewWorkflow("bench")
				after := make([]string, width)
				for i := range width {
					after[i] = fmt.Sprint("d", i)
					wf.Add(after[i], redrive.Request{Kind: "dep", Queue: "deps", Payload: wfBenchStep{Flow: f}})
				}
				wfs[f] = wf.Add("final", redrive.Request{Kind: "final", Queue: "final", Payload: wfBenchStep{Flow: f}}, after...)
			}
			start = time.Now()
			if p.batch == 0 {
				for _, wf := range wfs {
					if _, err := c.EnqueueWorkflow(ctx, wf); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				for k := 0; k < len(wfs); k += p.batch {
					if _, err := c.EnqueueWorkflows(ctx, wfs[k:min(k+p.batch, len(wfs))]); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		p.enq += time.Since(start)
		done += n
		if p.held {
			if firstStart.Load() != 0 {
				b.Fatalf("%s: a handler started while the queue was paused", p.name)
			}
			if _, err := c.ResumeQueue(ctx, "deps"); err != nil {
				b.Fatal(err)
			}
		}
		end := completedBy(done)
		p.took += end.Sub(time.Unix(0, firstStart.Load()))
		if r != nil {
			r.finals.Wait()
			for f := range flows {
				p.latencies = append(p.latencies, time.Duration(r.final[f].Load()-r.lastDep[f].Load()))
			}
		}
	}

	b.ResetTimer()
	for i := range b.N {
		// ABBA: the phases in order in rounds 0 and 3 of every 4,
		// reversed in rounds 1 and 2.
		for k := range phases {
			if i%4 == 1 || i%4 == 2 {
				k = len(phases) - 1 - k
			}
			run(phases[k])
		}
	}
	b.StopTimer()
	pct := func(l []time.Duration, p float64) float64 {
		slices.Sort(l)
		return float64(l[int(p*float64(len(l)-1))]) / float64(time.Millisecond)
	}
	by := map[string]*phase{}
	for _, p := range phases {
		by[p.name] = p
		b.ReportMetric(float64(n)*float64(b.N)/p.took.Seconds(), p.name+"-jobs/s")
		b.ReportMetric(p.enq.Seconds()*1000/float64(b.N), p.name+"-enqueue-ms")
	}
	wf, held := by["workflow"], by["held-workflow"]
	b.ReportMetric(pct(wf.latencies, 0.5), "final-p50-ms")
	b.ReportMetric(pct(wf.latencies, 0.99), "final-p99-ms")
	b.ReportMetric(pct(held.latencies, 0.99), "held-final-p99-ms")
	b.ReportMetric(by["plain"].took.Seconds()/wf.took.Seconds(), "workflow/plain")
	b.ReportMetric(by["plain"].took.Seconds()/by["batch"].took.Seconds(), "batch/plain")
	b.ReportMetric(by["held-plain"].took.Seconds()/held.took.Seconds(), "held-workflow/plain")
}
