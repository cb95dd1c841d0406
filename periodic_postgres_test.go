package redrive_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// The periodic proof on PostgreSQL: three worker processes (this test
// binary, re-executed) declare the same schedule, every second, and share
// one schema for 30 s; the one that leads (holds the maintenance
// election) is killed with SIGKILL half-way and restarted. Every
// occurrence from the schedule's creation to the end must have exactly
// one job, run exactly once, completed at its first attempt: none
// enqueued twice, none skipped while a process was alive.

const (
	periodicChildEnv = "REDRIVE_PERIODIC_CHILD" // the schema
	periodicIDEnv    = "REDRIVE_PERIODIC_ID"
	periodicRun      = 30 * time.Second
	// periodicRoundMsg is what a child logs after each round of its
	// scheduler.
	periodicRoundMsg = "periodic round"
)

// TestPeriodicClusterChild is a worker process of TestPeriodicThreeProcesses;
// it does nothing in a normal run. It works until SIGTERM, SIGKILL, or its
// parent goes away, logging JSON to stderr.
func TestPeriodicClusterChild(t *testing.T) {
	schema := os.Getenv(periodicChildEnv)
	if schema == "" {
		return // only does something as a child process
	}
	id := os.Getenv(periodicIDEnv)
	parent := os.Getppid()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("child", id)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := postgres.Open(ctx, os.Getenv(pgURLEnv), postgres.Options{Schema: schema, MaxConns: 6, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	w := redrive.NewWorker(c, redrive.WorkerOptions{ID: id, Queues: map[string]int{"ticks": 4}, Logger: log,
		PollInterval: 250 * time.Millisecond,
		Periodic:     []redrive.Periodic{{Name: "tick", Every: time.Second, Kind: "tick", Options: []redrive.Option{redrive.InQueue("ticks")}}}})
	runs := pgx.Identifier{schema, "tick_runs"}.Sanitize()
	w.HandleFunc("tick", func(ctx context.Context, j *redrive.Job) error {
		_, err := st.Pool().Exec(ctx, `INSERT INTO `+runs+` (job_id, child) VALUES ($1, $2)`, j.ID, id)
		return err
	})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The parent waits for the rounds of this child's scheduler, which
	// it reads in the log.
	rounds := redrive.PeriodicSignal(w)
	go func() {
		// No event tells a process its parent is gone: look every 200ms.
		watch := time.NewTicker(200 * time.Millisecond)
		defer watch.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-rounds:
				log.Info(periodicRoundMsg)
			case <-watch.C:
				if os.Getppid() != parent {
					cancel()
				}
			}
		}
	}()
	if err := w.Run(runCtx); err != nil {
		t.Fatal(err)
	}
}

// periodicChild is a running child process.
type periodicChild struct {
	id     string
	cmd    *exec.Cmd
	log    string
	exited chan error
}

func startPeriodicChild(t *testing.T, schema, id string) *periodicChild {
	t.Helper()
	ch := &periodicChild{id: id, log: filepath.Join(t.TempDir(), id+".log"), exited: make(chan error, 1)}
	out, err := os.Create(ch.log)
	if err != nil {
		t.Fatal(err)
	}
	ch.cmd = exec.Command(os.Args[0], "-test.run=^TestPeriodicClusterChild$", "-test.count=1")
	ch.cmd.Env = append(os.Environ(), periodicChildEnv+"="+schema, periodicIDEnv+"="+id)
	ch.cmd.Stdout, ch.cmd.Stderr = out, out
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ch.exited <- ch.cmd.Wait(); out.Close() }()
	t.Cleanup(func() {
		if ch.cmd.ProcessState == nil {
			ch.cmd.Process.Kill()
			<-ch.exited
		}
	})
	return ch
}

// elections returns the times this child's log says it was elected for
// maintenance.
func (ch *periodicChild) elections() []time.Time {
	return ch.logged(func(msg, role string) bool { return msg == "postgres: elected" && role == "maintenance" })
}

// rounds counts the rounds of this child's scheduler that ended after t.
func (ch *periodicChild) rounds(t time.Time) int {
	n := 0
	for _, at := range ch.logged(func(msg, _ string) bool { return msg == periodicRoundMsg }) {
		if at.After(t) {
			n++
		}
	}
	return n
}

// logged returns the times of the lines of this child's log that match.
func (ch *periodicChild) logged(match func(msg, role string) bool) []time.Time {
	f, err := os.Open(ch.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Role string    `json:"role"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && match(l.Msg, l.Role) {
			out = append(out, l.Time)
		}
	}
	return out
}

func (ch *periodicChild) stop(t *testing.T) {
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-ch.exited:
		if err != nil {
			b, _ := os.ReadFile(ch.log)
			t.Errorf("child %s: %v\n%s", ch.id, err, b)
		}
	case <-time.After(40 * time.Second):
		ch.cmd.Process.Kill()
		<-ch.exited
		t.Errorf("child %s did not stop within 40s of SIGTERM", ch.id)
	}
}

// tickJobs returns every job of the schedule, oldest occurrence first.
func tickJobs(t *testing.T, c *redrive.Client) []*redrive.Job {
	t.Helper()
	var out []*redrive.Job
	p := redrive.Page{Limit: store.MaxPageSize}
	for {
		res, err := c.List(t.Context(), redrive.Filter{Kind: "tick"}, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Jobs...)
		if res.Next == "" {
			break
		}
		p.Cursor = res.Next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunAt.Before(out[j].RunAt) })
	return out
}

// unfinishedTicks counts the schedule's jobs not completed yet.
func unfinishedTicks(t *testing.T, c *redrive.Client) int {
	n := 0
	for _, j := range tickJobs(t, c) {
		if j.State != redrive.Completed {
			n++
		}
	}
	return n
}

func TestPeriodicThreeProcesses(t *testing.T) {
	url := pgTestURL(t)
	st, schema := pgFreshSchema(t, url, "periodic_")
	ctx := t.Context()
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "tick_runs"}.Sanitize()+
		` (job_id bigint NOT NULL, child text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	start := time.Now()
	children := []*periodicChild{}
	for i := range 3 {
		children = append(children, startPeriodicChild(t, schema, fmt.Sprintf("periodic-%d", i)))
	}

	// Half-way, kill the leader at a quiet moment: every job enqueued so
	// far completed, mid-way between two occurrences, so that the kill
	// interrupts the schedule and nothing else.
	time.Sleep(periodicRun/2 - time.Since(start)) // real time: the first half of the run
	leader := -1
	testwait.Until(t, "a child to say it was elected", 10*time.Second, func() bool {
		for i, ch := range children {
			if len(ch.elections()) > 0 {
				leader = i
			}
		}
		return leader >= 0
	})
	testwait.Watch(t, "a moment mid-way between two occurrences with every tick job completed", 10*time.Second, func() (bool, string) {
		frac := time.Duration(time.Now().UnixNano() % int64(time.Second))
		n := unfinishedTicks(t, c)
		return frac > 300*time.Millisecond && frac < 600*time.Millisecond && n == 0, fmt.Sprintf("%d unfinished", n)
	})
	killed := children[leader]
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-killed.exited
	t.Logf("killed the leader %s (pid %d) at %s", killed.id, killed.cmd.Process.Pid, killedAt.Format("15:04:05.000"))
	time.Sleep(3 * time.Second) // real time: occurrences come while the killed leader is down
	children[leader] = startPeriodicChild(t, schema, killed.id+"-restarted")

	time.Sleep(periodicRun - time.Since(start)) // real time: the second half of the run
	if _, err := c.PauseSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	// Let a pass that read the schedule before the pause finish: two
	// rounds of every child's scheduler end after the pause (the second
	// began after it, and saw the pause). Then every job completes.
	testwait.Until(t, "two rounds of every child's scheduler after the pause", 30*time.Second, func() bool {
		for _, ch := range children {
			if ch.rounds(pausedAt) < 2 {
				return false
			}
		}
		return true
	})
	testwait.Watch(t, "every tick job to complete after the pause", 30*time.Second, func() (bool, string) {
		n := unfinishedTicks(t, c)
		return n == 0, fmt.Sprintf("%d unfinished", n)
	})
	var newLeader time.Time
	for _, ch := range children {
		for _, e := range ch.elections() {
			if e.After(killedAt) && (newLeader.IsZero() || e.Before(newLeader)) {
				newLeader = e
			}
		}
		ch.stop(t)
	}
	if newLeader.IsZero() {
		t.Error("no process was elected after the leader was killed")
	} else {
		t.Logf("a new leader was elected %s after the kill", newLeader.Sub(killedAt).Round(time.Millisecond))
	}

	sc, err := st.GetSchedule(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	jobs := tickJobs(t, c)
	if len(jobs) < int(periodicRun/time.Second)-4 {
		t.Fatalf("%d jobs in %s, want one a second", len(jobs), periodicRun)
	}
	// One job per occurrence second, no gap, from the first occurrence
	// after the schedule was created to the pause.
	first := sc.CreatedAt.Truncate(time.Second).Add(time.Second)
	if !jobs[0].RunAt.Equal(first) {
		t.Errorf("first occurrence %s, want %s (the first second after the schedule's creation at %s)",
			jobs[0].RunAt.Format("15:04:05.000"), first.Format("15:04:05.000"), sc.CreatedAt.Format("15:04:05.000"))
	}
	if last := jobs[len(jobs)-1].RunAt; last.Before(pausedAt.Truncate(time.Second).Add(-2 * time.Second)) {
		t.Errorf("last occurrence %s, long before the pause at %s", last.Format("15:04:05.000"), pausedAt.Format("15:04:05.000"))
	}
	runs := map[int64]int{}
	rows, err := st.Pool().Query(ctx, `SELECT job_id, count(*) FROM `+pgx.Identifier{schema, "tick_runs"}.Sanitize()+` GROUP BY job_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		runs[id] = n
	}
	rows.Close()
	var maxLate, handoffLate time.Duration
	var lateAt time.Time
	for i, j := range jobs {
		if want := redrive.PeriodicKey("tick", j.RunAt); j.IdempotencyKey != want {
			t.Errorf("job %d: key %q, want %q", j.ID, j.IdempotencyKey, want)
		}
		if i > 0 && !j.RunAt.Equal(jobs[i-1].RunAt.Add(time.Second)) {
			t.Errorf("occurrence after %s is %s: a gap or a duplicate", jobs[i-1].RunAt.Format("15:04:05.000"), j.RunAt.Format("15:04:05.000"))
		}
		if j.State != redrive.Completed || j.Attempt != 1 || runs[j.ID] != 1 {
			t.Errorf("job %d (%s): %s at attempt %d, run %d times; want completed once, at attempt 1",
				j.ID, j.RunAt.Format("15:04:05.000"), j.State, j.Attempt, runs[j.ID])
		}
		late := j.CreatedAt.Sub(j.RunAt)
		if late > maxLate {
			maxLate, lateAt = late, j.RunAt
		}
		if j.RunAt.After(killedAt) && !j.RunAt.After(killedAt.Add(time.Second)) {
			handoffLate = late // the first occurrence after the kill
		}
	}
	if len(runs) != len(jobs) {
		t.Errorf("%d jobs ran, %d jobs exist", len(runs), len(jobs))
	}
	t.Logf("%d occurrences from %s to %s, each enqueued and run once; the first after the kill enqueued %s after its time; the latest %s (at %s)",
		len(jobs), jobs[0].RunAt.Format("15:04:05"), jobs[len(jobs)-1].RunAt.Format("15:04:05"), handoffLate.Round(time.Millisecond),
		maxLate.Round(time.Millisecond), lateAt.Format("15:04:05"))
}
