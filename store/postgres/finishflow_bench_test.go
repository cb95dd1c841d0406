package postgres_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// BenchmarkFinishWorkflowJobs measures the Finish calls of a busy
// worker's completer on workflow jobs against plain ones: each round
// enqueues (untimed) 200 workflows of 9 jobs fanning into a tenth (or
// the same 1,800 jobs outside any workflow), leases them 100 at a time,
// shuffles each fetch's jobs (handlers end in any order), and completes
// them by Finish calls of 12 outcomes, the completer's usual batch in
// BenchmarkWorkflowsConcurrent, so that a call holds completions of
// several workflows and releases some final jobs. It reports the mean
// time of a Finish call (ms/finish), which includes its commit, where
// PostgreSQL applies the workflows' consequences (jobs_flow_batch), and
// checks that every final job was released. It also reports the
// notifications a listener heard for the final jobs' queue, a call
// (final-notifies/finish): each is a transaction that notified. "plain"
// and "plain-in-commit" (ABBA) are the plain jobs' calls with and
// without the settle statement Finish sends after its own (a call of
// plain jobs settles nothing, but sends it). The sub-benchmark "0038"
// runs on the schema without migration 0046 (the workflows'
// completions applied a workflow at a time); "in-commit" and
// "after-commit", in ABBA order, on the current one, the first with the
// releases left to the trigger at the commit, which notifies in it (as
// before migration 0050), the second with Finish settling them and
// announcing them after its commit (released.go):
//
//	REDRIVE_POSTGRES_URL=... go test ./store/postgres -run '^$' -bench FinishWorkflowJobs -benchtime 3x -count 3
func BenchmarkFinishWorkflowJobs(b *testing.B) {
	for _, c := range []struct {
		name     string
		through  int // the last migration applied (0: all)
		flows    bool
		inCommit bool
	}{{"plain-in-commit", 0, false, true}, {"plain", 0, false, false}, {"plain", 0, false, false}, {"plain-in-commit", 0, false, true},
		{"0038", 41, true, true},
		{"in-commit", 0, true, true}, {"after-commit", 0, true, false}, {"after-commit", 0, true, false}, {"in-commit", 0, true, true}} {
		b.Run(c.name, func(b *testing.B) {
			schema := newSchema(b)
			if c.through > 0 {
				restore := postgres.MigrateThrough(c.through)
				defer restore()
			}
			defer postgres.SetReleaseInCommit(c.inCommit)()
			s := open(b, schema)
			defer s.Close()
			benchFinishFlows(b, s, schema, c.flows)
		})
	}
}

func benchFinishFlows(b *testing.B, s *postgres.Store, schema string, flows bool) {
	// A listener, as another process's, counts the notifications of the
	// final jobs' queue; "end" (sent last, heard last) says all were
	// heard.
	var heard atomic.Int64
	listening, ended := make(chan struct{}), make(chan struct{})
	lctx, stopListen := context.WithCancel(b.Context())
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		first := true
		s.Listen(lctx, func(q string) {
			switch {
			case q == "" && first:
				first = false
				close(listening)
			case q == "final":
				heard.Add(1)
			case q == "end":
				close(ended)
			}
		})
	}()
	defer func() { stopListen(); <-listened }()
	<-listening
	const nflows, width, fetch, batch = 200, 9, 100, 12
	ctx := b.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	var took time.Duration
	calls := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		now := time.Now().UTC()
		if flows {
			for range nflows {
				var w store.NewWorkflow
				after := make([]string, width)
				for i := range after {
					after[i] = string(rune('a' + i))
					w.Jobs = append(w.Jobs, store.WorkflowNode{Name: after[i], Job: store.NewJob{Queue: "deps", Kind: "dep", Payload: []byte(`{}`)}})
				}
				w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "final", Job: store.NewJob{Queue: "final", Kind: "final", Payload: []byte(`{}`)}, After: after})
				if _, err := s.EnqueueWorkflow(ctx, w, now); err != nil {
					b.Fatal(err)
				}
			}
		} else {
			jobs := make([]store.NewJob, nflows*width)
			for i := range jobs {
				jobs[i] = store.NewJob{Queue: "deps", Kind: "dep", Payload: []byte(`{}`)}
			}
			if _, err := s.Enqueue(ctx, jobs, now); err != nil {
				b.Fatal(err)
			}
		}
		var leased []*store.Job
		for {
			at := time.Now()
			got, err := s.Fetch(ctx, store.FetchParams{Queue: "deps", Limit: fetch, Now: at, LeaseUntil: at.Add(time.Hour), Worker: "w"})
			if err != nil {
				b.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
			leased = append(leased, got...)
		}
		if len(leased) != nflows*width {
			b.Fatalf("leased %d jobs, want %d", len(leased), nflows*width)
		}
		b.StartTimer()
		for len(leased) > 0 {
			k := min(batch, len(leased))
			outs := make([]store.Outcome, k)
			for i, j := range leased[:k] {
				outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w", Kind: store.Complete,
					At: time.Now(), Counters: []store.Counter{{Queue: j.Queue, Name: store.StatSucceeded, N: 1}}}
			}
			leased = leased[k:]
			start := time.Now()
			applied, err := s.Finish(ctx, outs)
			took += time.Since(start)
			calls++
			if err != nil {
				b.Fatal(err)
			}
			for i, ok := range applied {
				if !ok {
					b.Fatalf("outcome of job %d not applied", outs[i].JobID)
				}
			}
		}
		b.StopTimer()
		s.WaitAnnounced()
		if flows {
			var blocked, due int
			err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'blocked'), count(*) FILTER (WHERE state = 'pending')
				FROM `+schema+`.jobs WHERE queue = 'final'`).Scan(&blocked, &due)
			if err != nil {
				b.Fatal(err)
			}
			if blocked != 0 {
				b.Fatalf("%d final jobs still blocked (%d released)", blocked, due)
			}
			if _, err := s.Pool().Exec(ctx, `DELETE FROM `+schema+`.jobs WHERE queue = 'final'`); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	if _, err := s.Pool().Exec(ctx, `SELECT pg_notify($1, 'end')`, s.Channel()); err != nil {
		b.Fatal(err)
	}
	<-ended
	b.ReportMetric(float64(took.Microseconds())/1000/float64(calls), "ms/finish")
	b.ReportMetric(float64(heard.Load())/float64(calls), "final-notifies/finish")
}
