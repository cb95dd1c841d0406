package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// killJobs is how many jobs each operation of the SIGKILL proof handles:
// 20 batches of 100, the kill after the tenth. (10,000 cost 12 minutes of
// the package's run on a loaded machine, most of it seeding and checking
// SQLite under -race, and proved nothing more: each batch commits with
// its cursor, whatever their number.)
const killJobs = 2000

// seedFinished makes n jobs of queue end as state (completed or dead),
// through the store, in bulk.
func seedFinished(t *testing.T, st store.Store, queue string, state redrive.State, n int) {
	t.Helper()
	ctx := context.Background()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	for done := 0; done < n; {
		reqs := make([]redrive.Request, min(n-done, 1000))
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "doc", Queue: queue, Payload: map[string]int{"doc": done + i}}
		}
		if _, err := c.EnqueueMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		jobs, err := st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: len(reqs), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "seed"})
		if err != nil || len(jobs) != len(reqs) {
			t.Fatalf("fetch: %d, %v", len(jobs), err)
		}
		outs := make([]store.Outcome, len(jobs))
		for i, j := range jobs {
			outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "seed", Kind: store.Complete, At: now}
			if state == redrive.Dead {
				outs[i] = store.Outcome{JobID: j.ID, Queue: queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "seed", Kind: store.Bury, At: now,
					Event: &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: now}, Error: "boom", Class: failure.Permanent,
					DeadReason: "permanent_error", Fingerprint: "fp"}
			}
		}
		if _, err := st.Finish(ctx, outs); err != nil {
			t.Fatal(err)
		}
		done += len(reqs)
	}
}

// allJobs reads every job of queue with its history.
func allJobs(t *testing.T, st store.Store, f store.Filter) []*store.Job {
	t.Helper()
	var out []*store.Job
	p := store.Page{Limit: store.MaxPageSize}
	for {
		res, err := st.List(context.Background(), f, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Jobs...)
		if res.Next == "" {
			return out
		}
		p.Cursor = res.Next
	}
}

// killMidway starts `redrive serve` on the store, waits until the
// operation has handled half its jobs, kills serve with SIGKILL, checks
// that the operation's progress matches what the store holds (check), then
// starts serve again and waits for the operation to end. It returns the
// progress at the kill.
func killMidway(t *testing.T, bin string, args []string, c *redrive.Client, id string, check func(op *redrive.Operation)) *redrive.Operation {
	t.Helper()
	ctx := context.Background()
	p := startRedrive(t, bin, nil, args...)
	// However long it takes (under -race on a loaded machine, minutes),
	// as long as the operation moves.
	testwait.Progress(t, "the operation to get half-way", 2*time.Minute, func() (int64, bool) {
		op, err := c.Operation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if op.State.Final() {
			t.Fatalf("operation ended before it got half-way: %+v", op)
		}
		return op.Progress.Processed, op.Progress.Processed >= killJobs/2
	})
	// A random moment within the next batches (one every 40 ms at 2,500
	// jobs a second), so that the kill may land while a batch's
	// transaction is in flight, not only between batches. A real wait:
	// the moment of the kill is what the test varies.
	time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	atKill, err := c.Operation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if atKill.State != redrive.OperationRunning || atKill.Progress.Processed >= killJobs {
		t.Fatalf("killed midway, the operation is %s with %d processed: the kill came too late", atKill.State, atKill.Progress.Processed)
	}
	check(atKill)
	t.Logf("killed serve with SIGKILL at %d of %d (cursor %d); restarting", atKill.Progress.Processed, killJobs, atKill.Cursor)
	start := time.Now()
	p2 := startRedrive(t, bin, nil, args...)
	// Fails on a stall of 2 minutes, not on slowness.
	seen, moved := int64(-1), time.Now()
	final, err := c.WaitOperation(ctx, id, 20*time.Millisecond, func(op *redrive.Operation) {
		if op.Progress.Processed > seen {
			seen, moved = op.Progress.Processed, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			t.Fatalf("operation still %s after restart, no progress for 2 minutes: %+v", op.State, op.Progress)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the restarted serve finished it %s after its start", time.Since(start).Round(time.Millisecond))
	p2.stop()
	if final.State != redrive.OperationDone {
		t.Fatalf("after restart: %+v", final)
	}
	return final
}

// TestOperationsSurviveSIGKILL is the proof that durable operations
// handle every job exactly once across a crash: a replay of 2,000
// completed jobs, a bulk redrive of 2,000 dead jobs and a bulk cancel
// of 2,000 pending jobs, each run by
// `redrive serve`, which is killed with SIGKILL half-way and started
// again. At the kill, what the store holds matches the operation's
// progress (each batch commits with its cursor); at the end each
// replayed job has exactly one replay, and each dead job was redriven
// exactly once.
func TestOperationsSurviveSIGKILL(t *testing.T) {
	clearConnEnv(t)
	bin := buildRedrive(t)
	type target struct {
		name string
		open func(t *testing.T) (store.Store, []string)
	}
	targets := []target{
		{"sqlite", func(t *testing.T) (store.Store, []string) {
			db := filepath.Join(t.TempDir(), "redrive.db")
			st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return st, []string{"--db", db}
		}},
		{"postgres", func(t *testing.T) (store.Store, []string) {
			u := pgURL(t)
			schema := fmt.Sprintf("redrive_killtest_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
			t.Cleanup(func() { dropSchema(t, u, schema) })
			st, err := postgres.Open(context.Background(), u, postgres.Options{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return st, []string{"--database-url", u, "--schema", schema}
		}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			st, conn := tg.open(t)
			t.Cleanup(func() { st.Close() })
			// serve works queue "default" only: the replayed and redriven
			// jobs wait, pending, for the test to count them. A 2 s lease
			// lets the restarted serve take the killed one's operation
			// over soon.
			args := append([]string{"--addr", "127.0.0.1:0", "--lease", "2s"}, conn...)
			c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
			ctx := context.Background()
			seedFinished(t, st, "docs", redrive.Completed, killJobs)
			seedFinished(t, st, "dlq", redrive.Dead, killJobs)

			t.Run("replay", func(t *testing.T) {
				// 2,500 jobs a second: half-way comes after about 0.4 s.
				op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationReplay,
					Filter: redrive.Filter{Queue: "docs", States: []redrive.State{redrive.Completed}}, Rate: 2500, Note: "proof"})
				if err != nil {
					t.Fatal(err)
				}
				final := killMidway(t, bin, args, c, op.ID, func(op *redrive.Operation) {
					copies, err := st.Count(ctx, store.Filter{Queue: "docs", States: []store.State{store.Pending}})
					if err != nil {
						t.Fatal(err)
					}
					if copies != op.Progress.Replayed {
						t.Fatalf("at the kill the store holds %d replays, the operation counts %d: a batch and its cursor did not commit together", copies, op.Progress.Replayed)
					}
				})
				if final.Progress.Replayed != killJobs || final.Progress.Matched != killJobs {
					t.Fatalf("replay: %+v", final.Progress)
				}
				perSource := map[int64]int{}
				for _, j := range allJobs(t, st, store.Filter{Queue: "docs", States: []store.State{store.Pending}}) {
					if j.ReplayOf == 0 || len(j.History) != 1 || j.History[0].Kind != store.EventReplayed || j.History[0].ReplayOf != j.ReplayOf {
						t.Fatalf("replay job %d: replay_of %d, history %+v", j.ID, j.ReplayOf, j.History)
					}
					perSource[j.ReplayOf]++
				}
				sources := allJobs(t, st, store.Filter{Queue: "docs", States: []store.State{store.Completed}})
				if len(sources) != killJobs || len(perSource) != killJobs {
					t.Fatalf("%d sources, %d of them replayed; want %d", len(sources), len(perSource), killJobs)
				}
				for _, s := range sources {
					if n := perSource[s.ID]; n != 1 {
						t.Fatalf("job %d replayed %d times, want once", s.ID, n)
					}
				}
			})

			t.Run("redrive", func(t *testing.T) {
				op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive,
					Filter: redrive.Filter{Queue: "dlq"}, Rate: 2500, Note: "proof"})
				if err != nil {
					t.Fatal(err)
				}
				final := killMidway(t, bin, args, c, op.ID, func(op *redrive.Operation) {
					redriven, err := st.Count(ctx, store.Filter{Queue: "dlq", States: []store.State{store.Pending}})
					if err != nil {
						t.Fatal(err)
					}
					if redriven != op.Progress.Redriven {
						t.Fatalf("at the kill the store holds %d redriven jobs, the operation counts %d: a batch and its cursor did not commit together", redriven, op.Progress.Redriven)
					}
				})
				if final.Progress.Redriven != killJobs || final.Progress.Matched != killJobs || final.Progress.Processed != killJobs {
					t.Fatalf("redrive: %+v", final.Progress)
				}
				jobs := allJobs(t, st, store.Filter{Queue: "dlq"})
				if len(jobs) != killJobs {
					t.Fatalf("%d jobs in dlq, want %d", len(jobs), killJobs)
				}
				for _, j := range jobs {
					events := 0
					for _, e := range j.History {
						if e.Kind == store.EventRedriven {
							events++
						}
					}
					if j.State != store.Pending || j.Redriven != 1 || events != 1 {
						t.Fatalf("job %d: %s, redriven %d times, %d redriven events; want pending, once", j.ID, j.State, j.Redriven, events)
					}
				}
			})

			t.Run("cancel", func(t *testing.T) {
				// Pending jobs of a queue serve does not work.
				for done := 0; done < killJobs; done += 1000 {
					reqs := make([]redrive.Request, 1000)
					for i := range reqs {
						reqs[i] = redrive.Request{Kind: "doc", Queue: "waiting", Payload: map[string]int{"doc": done + i}}
					}
					if _, err := c.EnqueueMany(ctx, reqs); err != nil {
						t.Fatal(err)
					}
				}
				op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationCancel,
					Filter: redrive.Filter{Queue: "waiting"}, Rate: 2500, Note: "proof"})
				if err != nil {
					t.Fatal(err)
				}
				final := killMidway(t, bin, args, c, op.ID, func(op *redrive.Operation) {
					canceled, err := st.Count(ctx, store.Filter{Queue: "waiting", States: []store.State{store.Canceled}})
					if err != nil {
						t.Fatal(err)
					}
					if canceled != op.Progress.Canceled {
						t.Fatalf("at the kill the store holds %d canceled jobs, the operation counts %d: a batch and its cursor did not commit together", canceled, op.Progress.Canceled)
					}
				})
				if final.Progress.Canceled != killJobs || final.Progress.Matched != killJobs || final.Progress.Processed != killJobs {
					t.Fatalf("cancel: %+v", final.Progress)
				}
				for _, j := range allJobs(t, st, store.Filter{Queue: "waiting"}) {
					events := 0
					for _, e := range j.History {
						if e.Kind == store.EventCanceled {
							events++
						}
					}
					if j.State != store.Canceled || events != 1 {
						t.Fatalf("job %d: %s with %d canceled events; want canceled, once", j.ID, j.State, events)
					}
				}
			})
		})
	}
}
