package postgres_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// BenchmarkPhases measures what the server spends on the two statements
// of a busy worker, apart: b.N batches of 1,000 jobs are enqueued
// (untimed), then leased 1,000 at a time by one connection, then completed
// 1,000 at a time by another, each phase on a backend of its own that
// exits when its phase ends. It reports each phase's time per job and,
// when the server runs on this machine (its backends' /proc entries are
// readable), the CPU time each backend spent per job: one connection, so
// no fetcher skips rows another locked. The backends' process ids are
// logged (-test.v), so that a server run under a profiler can be read
// per phase (see docs/BENCHMARKS.md), with a third one's: the rescue's
// read once every lease ended, untimed (what a lease leaves for the
// rescue to do, to compare designs of it).
//
//	REDRIVE_POSTGRES_URL=... go test ./store/postgres -run '^$' -bench Phases -benchtime 100x
//
// REDRIVE_PHASES_BATCH sets the jobs of a fetch and of a completion
// call (1,000 unless set), for instance 100, the engine's usual batch.
// REDRIVE_PHASES_SCHEMA runs it in that schema, which must exist with
// the store's migrations applied and no jobs, and is left in place: to
// count a variant of the schema made by hand (a rewritten table, other
// indexes) against the migrations' own.
func BenchmarkPhases(b *testing.B) {
	url, schema := dbURL(b), os.Getenv("REDRIVE_PHASES_SCHEMA")
	if schema == "" {
		schema = newSchema(b)
	}
	per := 1000
	if v := os.Getenv("REDRIVE_PHASES_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("REDRIVE_PHASES_BATCH=%q: want a positive number of jobs", v)
		}
		per = n
	}
	ctx := b.Context()
	conn := func() (*postgres.Store, int) {
		b.Helper()
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 1, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		var pid int
		if err := s.Pool().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			b.Fatal(err)
		}
		return s, pid
	}
	b.StopTimer()
	s, _ := conn()
	jobs := make([]store.NewJob, 10*per)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "bench", Kind: "noop", Payload: json.RawMessage(`{"n":1}`), MaxRetries: -1}
	}
	now := time.Now().UTC()
	for left := b.N * per; left > 0; left -= len(jobs) {
		if _, err := s.Enqueue(ctx, jobs[:min(left, len(jobs))], now); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()

	// Lease every job, 1,000 at a time.
	s, leasePID := conn()
	var leased [][]*store.Job
	cpu0, t0 := backendCPU(leasePID), time.Now()
	b.StartTimer()
	for {
		now := time.Now().UTC()
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: per, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil {
			b.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		leased = append(leased, got)
	}
	b.StopTimer()
	leaseWall, leaseCPU := time.Since(t0), cpuSince(leasePID, cpu0)
	s.Close()

	// Complete them, 1,000 at a time, as the engine's completer does.
	s, completePID := conn()
	outs := make([]store.Outcome, 0, per)
	cpu0, t0 = backendCPU(completePID), time.Now()
	b.StartTimer()
	for _, got := range leased {
		now := time.Now().UTC()
		outs = outs[:0]
		for _, j := range got {
			outs = append(outs, store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete, At: now,
				Duration: store.Duration(time.Millisecond), Counters: []store.Counter{{Queue: "bench", Name: store.StatSucceeded, N: 1}}})
		}
		applied, err := s.Finish(ctx, outs)
		if err != nil {
			b.Fatal(err)
		}
		for i, ok := range applied {
			if !ok {
				b.Fatalf("completion of job %d not applied", outs[i].JobID)
			}
		}
	}
	b.StopTimer()
	completeWall, completeCPU := time.Since(t0), cpuSince(completePID, cpu0)
	s.Close()

	// The rescue's read once every lease ended (untimed): it finds none
	// of the jobs running, the work a lease leaves for the rescue.
	s, rescuePID := conn()
	if exp, err := s.Expired(ctx, time.Now().Add(2*time.Hour), 500); err != nil || len(exp) != 0 {
		b.Fatalf("Expired after every job completed: %d jobs, %v", len(exp), err)
	}

	n := float64(b.N * per)
	if len(leased)*per < b.N*per {
		b.Fatalf("leased %d batches for %d jobs", len(leased), b.N*per)
	}
	s.Close()
	b.Logf("%d jobs; backends: lease %d, complete %d, rescue %d", b.N*per, leasePID, completePID, rescuePID)
	b.ReportMetric(float64(leaseWall.Microseconds())/n, "lease-µs/job")
	b.ReportMetric(float64(completeWall.Microseconds())/n, "complete-µs/job")
	if leaseCPU >= 0 && completeCPU >= 0 {
		b.ReportMetric(leaseCPU.Seconds()*1e6/n, "lease-server-µs/job")
		b.ReportMetric(completeCPU.Seconds()*1e6/n, "complete-server-µs/job")
	}
}

// cpuSince returns the CPU time pid used since it had used before, or -1
// when it cannot be read.
func cpuSince(pid int, before time.Duration) time.Duration {
	now := backendCPU(pid)
	if before < 0 || now < 0 {
		return -1
	}
	return now - before
}

// backendCPU returns the CPU time (user and system) the server process
// pid has used, or -1 when its /proc entry cannot be read (a server on
// another machine).
func backendCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th of them, in clock
	// ticks (100 a second on Linux).
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+k) * 10 * time.Millisecond
}
