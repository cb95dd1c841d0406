package redrive_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The workflow fleet test (issue 32's goal across processes): 3 worker
// processes (this test binary, re-executed) on one store run many
// diamond workflows (A -> B, C -> D) at once, under the three failure
// policies, half of them with a C that fails permanently, while one
// process is SIGKILLed mid-run. Each handler appends its start (with
// what DependencyResults says of its dependencies) and its end to a file
// of its process, one write each, which a SIGKILL does not lose (the
// kernel has it). Once the fleet is quiet, the parent redrives the dead
// C's of the wait and run workflows with a fixed payload, waits again,
// and checks, from the files and the store: every workflow ended as its
// policy says, every callback that was due fired and ran once (a second
// run only where the first was cut short by the SIGKILL), no dependent
// started before each of its dependencies had ended (and, by the store,
// completed), and no job was lost.

const (
	wfFleetStoreEnv = "REDRIVE_WF_FLEET_STORE" // "sqlite:<path>" or "postgres:<schema>"
	wfFleetDirEnv   = "REDRIVE_WF_FLEET_DIR"   // where each process writes its events
	wfFleetIDEnv    = "REDRIVE_WF_FLEET_ID"
	wfFleetFlows    = 120 // 40 per policy, half failing
)

// wfStep is the payload of every job of the fleet's workflows.
type wfStep struct {
	Flow  int    `json:"flow"`
	Node  string `json:"node"`
	Fail  bool   `json:"fail,omitempty"`  // C: fails permanently ...
	Fixed bool   `json:"fixed,omitempty"` // ... until redriven with this
}

// wfEvent is one start or end a handler reports.
type wfEvent struct {
	Process string                 `json:"p"`
	Job     int64                  `json:"job"`
	Attempt int                    `json:"attempt"`
	Node    string                 `json:"node"`
	Flow    int                    `json:"flow"`
	End     bool                   `json:"end,omitempty"`
	OK      bool                   `json:"ok,omitempty"`   // an end that completes the job
	Deps    map[string]store.State `json:"deps,omitempty"` // at the start, by DependencyResults
	At      int64                  `json:"at"`             // UnixNano
}

// TestWorkflowFleetChild is a worker process of the workflow fleet tests;
// it does nothing in a normal run. It works until SIGTERM or SIGKILL.
func TestWorkflowFleetChild(t *testing.T) {
	spec := os.Getenv(wfFleetStoreEnv)
	if spec == "" {
		return // only does something as a child process of the tests below
	}
	id := os.Getenv(wfFleetIDEnv)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", id)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := openLimitFleetStore(ctx, spec, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f, err := os.OpenFile(filepath.Join(os.Getenv(wfFleetDirEnv), id+".jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	record := func(e wfEvent) error {
		e.Process, e.At = id, time.Now().UnixNano()
		b, _ := json.Marshal(e)
		mu.Lock()
		defer mu.Unlock()
		_, err := f.Write(append(b, '\n')) // one write: whole or nothing
		return err
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	// Leases of 30 s: on a loaded machine (-race beside other test
	// binaries, three processes on one SQLite file) 5 s leases expired
	// under running handlers, whose jobs then ran again. A killed
	// process's jobs are rescued at once anyway: its process is seen gone
	// on this host.
	w := redrive.NewWorker(c, redrive.WorkerOptions{
		ID: id, Queues: map[string]int{redrive.DefaultQueue: 8}, Logger: log,
		LeaseDuration: 30 * time.Second, RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond,
	})
	work := func(ctx context.Context, j *redrive.Job, s wfStep) error {
		e := wfEvent{Job: j.ID, Attempt: j.Attempt, Node: s.Node, Flow: s.Flow}
		if j.Kind == "wf" && (s.Node == "B" || s.Node == "C" || s.Node == "D") {
			deps, err := c.DependencyResults(ctx, j.ID)
			if err != nil {
				return err
			}
			e.Deps = map[string]store.State{}
			for _, d := range deps {
				e.Deps[d.Name] = d.State
			}
		}
		if err := record(e); err != nil {
			return err
		}
		select { // the handler's own work, in real time
		case <-time.After(time.Duration(5+j.ID%25) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		var failed error
		if s.Fail && !s.Fixed {
			failed = &failure.Error{Class: failure.Permanent, Err: fmt.Errorf("%s of flow %d needs a fixed payload", s.Node, s.Flow)}
		}
		e.End, e.OK, e.Deps = true, failed == nil, nil
		if err := record(e); err != nil {
			return err
		}
		return failed
	}
	redrive.Handle(w, "wf", work)
	redrive.Handle(w, "cb", work)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWorkflowFleetSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	path := filepath.Join(t.TempDir(), "workflows.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testWorkflowFleet(t, st, "sqlite:"+path)
}

func TestWorkflowFleetPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	st, schema := pgFreshSchema(t, pgTestURL(t), "wffleet_")
	testWorkflowFleet(t, st, "postgres:"+schema)
}

// wfFlow is one of the fleet's workflows as the parent knows it.
type wfFlow struct {
	n      int
	policy redrive.OnDead
	fail   bool
	info   *redrive.WorkflowInfo
	ids    map[string]int64 // the jobs and the callbacks, by name
}

// wfDeps are the diamond's edges: each job's dependencies.
var wfDeps = map[string][]string{"A": nil, "B": {"A"}, "C": {"A"}, "D": {"B", "C"}}

// want returns the state each job and callback of f ends in, after the
// parent's redrive of the dead C's of the wait and run workflows.
func (f *wfFlow) want() map[string]store.State {
	m := map[string]store.State{"A": redrive.Completed, "B": redrive.Completed, "C": redrive.Completed, "D": redrive.Completed,
		"on_success": redrive.Completed, "on_complete": redrive.Completed, "on_death": store.Blocked}
	if !f.fail {
		return m
	}
	m["on_death"] = redrive.Completed
	if f.policy == redrive.CancelOnDead {
		m["C"], m["D"], m["on_success"] = redrive.Dead, redrive.Canceled, redrive.Canceled
	}
	return m
}

func testWorkflowFleet(t *testing.T, st store.Store, spec string) {
	ctx := t.Context()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	policies := []redrive.OnDead{redrive.WaitOnDead, redrive.CancelOnDead, redrive.RunOnDead}
	var flows []*wfFlow
	for n := range wfFleetFlows {
		f := &wfFlow{n: n, policy: policies[n%3], fail: n%6 >= 3}
		req := func(kind, node string) redrive.Request {
			return redrive.Request{Kind: kind, Payload: wfStep{Flow: n, Node: node, Fail: f.fail && node == "C"}}
		}
		w := redrive.NewWorkflow(fmt.Sprint("flow-", n)).OnDead(f.policy).
			OnSuccess(req("cb", "on_success")).OnComplete(req("cb", "on_complete")).OnDeath(req("cb", "on_death"))
		for _, node := range []string{"A", "B", "C", "D"} {
			w.Add(node, req("wf", node), wfDeps[node]...)
		}
		info, err := c.EnqueueWorkflow(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		f.info = info
		f.ids = map[string]int64{"on_success": info.OnSuccess, "on_complete": info.OnComplete, "on_death": info.OnDeath}
		for _, j := range info.Jobs {
			f.ids[j.Name] = j.JobID
		}
		flows = append(flows, f)
	}
	dir := t.TempDir()
	type child struct {
		id  string
		cmd *exec.Cmd
		out *os.File
	}
	var children []*child
	killed := map[string]bool{}
	for i := range 3 {
		ch := &child{id: fmt.Sprint("p", i)}
		ch.cmd = exec.Command(os.Args[0], "-test.run=^TestWorkflowFleetChild$", "-test.count=1")
		ch.cmd.Env = append(os.Environ(), wfFleetStoreEnv+"="+spec, wfFleetDirEnv+"="+dir, wfFleetIDEnv+"="+ch.id)
		ch.out, _ = os.CreateTemp(t.TempDir(), "child")
		ch.cmd.Stdout, ch.cmd.Stderr = ch.out, ch.out
		if err := ch.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, ch)
	}
	stopChildren := func() {
		for _, ch := range children {
			if !killed[ch.id] && ch.cmd.ProcessState == nil {
				ch.cmd.Process.Signal(syscall.SIGTERM)
				if err := ch.cmd.Wait(); err != nil {
					t.Errorf("child %s: %v", ch.id, err)
				}
			}
		}
	}
	defer func() {
		stopChildren()
		if t.Failed() {
			for _, ch := range children {
				b, _ := os.ReadFile(ch.out.Name())
				t.Logf("child %s output:\n%s", ch.id, b)
			}
		}
	}()
	count := func(states ...redrive.State) int64 {
		n, err := c.Count(ctx, redrive.Filter{States: states})
		if err != nil {
			t.Fatal(err)
		}
		return int64(n)
	}
	members := int64(4 * wfFleetFlows)
	// SIGKILL one process once a quarter of the jobs completed, and it
	// has handlers under way (by its events: a handler may end between
	// the look and the kill, so it is not a certainty).
	victim := children[0]
	testwait.Progress(t, "a quarter of the jobs to complete", 2*time.Minute, func() (int64, bool) {
		n := count(redrive.Completed)
		return n, n >= members/4 && wfRunning(filepath.Join(dir, victim.id+".jsonl")) > 0
	})
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.cmd.Wait()
	killed[victim.id] = true
	t.Logf("killed %s with %d jobs completed", victim.id, count(redrive.Completed))

	// Quiet: nothing due, nothing running (a killed process's jobs are
	// running until rescued). A dependent is released in the transaction
	// that completes its last dependency, and a callback in the one that
	// makes it due, so a quiet store stays quiet.
	quiet := func(what string) {
		t.Helper()
		testwait.Progress(t, what, 3*time.Minute, func() (int64, bool) {
			busy := count(redrive.Pending, redrive.Scheduled, redrive.Running)
			return count(redrive.Completed, redrive.Dead, redrive.Canceled), busy == 0
		})
	}
	quiet("the fleet to run every job it can")
	var redrives []*wfFlow
	for _, f := range flows {
		if !f.fail {
			continue
		}
		d, err := c.Get(ctx, f.ids["D"])
		if err != nil {
			t.Fatal(err)
		}
		switch f.policy {
		case redrive.WaitOnDead:
			if d.State != store.Blocked || d.Attempt != 0 {
				t.Errorf("flow %d (wait) with C dead: D %s after %d attempts, want blocked after none", f.n, d.State, d.Attempt)
			}
			redrives = append(redrives, f)
		case redrive.RunOnDead:
			if d.State != redrive.Completed {
				t.Errorf("flow %d (run) with C dead: D %s, want completed", f.n, d.State)
			}
			redrives = append(redrives, f)
		}
		if cj, err := c.Get(ctx, f.ids["C"]); err != nil || cj.State != redrive.Dead {
			t.Errorf("flow %d (%s): C %v (%v), want dead", f.n, f.policy, cj, err)
		}
	}
	for _, f := range redrives {
		fixed, _ := json.Marshal(wfStep{Flow: f.n, Node: "C", Fail: true, Fixed: true})
		if p, err := c.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{f.ids["C"]}, Payload: json.RawMessage(fixed), Note: "fixed"}); err != nil || p.Redriven != 1 {
			t.Fatalf("redrive of flow %d's C: %+v, %v", f.n, p, err)
		}
	}
	quiet("the fleet to run the redriven jobs and their dependents")
	stopChildren()

	// The store: every workflow ended as its policy says.
	for _, f := range flows {
		w, err := c.GetWorkflow(ctx, f.info.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantState := store.WorkflowSucceeded
		if f.fail && f.policy == redrive.CancelOnDead {
			wantState = store.WorkflowFinished
		}
		if w.State != wantState {
			t.Errorf("flow %d (%s, failing %v): %s, want %s", f.n, f.policy, f.fail, w.State, wantState)
		}
		for name, want := range f.want() {
			j, err := c.Get(ctx, f.ids[name])
			if err != nil {
				t.Fatal(err)
			}
			if j.State != want {
				t.Errorf("flow %d (%s, failing %v): %s %s, want %s", f.n, f.policy, f.fail, name, j.State, want)
			}
		}
	}
	if n := count(); n != int64(7*wfFleetFlows) {
		t.Errorf("%d jobs in the store, want %d", n, 7*wfFleetFlows)
	}

	// The events.
	var events []wfEvent
	for _, ch := range children {
		fh, err := os.Open(filepath.Join(dir, ch.id+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e wfEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				// Only the killed process may have left a line cut short.
				if !killed[ch.id] {
					t.Errorf("events of %s: %v", ch.id, err)
				}
				continue
			}
			events = append(events, e)
		}
		fh.Close()
	}
	checkWorkflowFleetEvents(t, flows, events, killed)
}

// wfRunning returns how many executions the events file at path shows
// started and not ended.
func wfRunning(path string) int {
	b, _ := os.ReadFile(path)
	open := map[int64]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e wfEvent
		if json.Unmarshal(line, &e) == nil {
			open[e.Job] = !e.End
		}
	}
	n := 0
	for _, o := range open {
		if o {
			n++
		}
	}
	return n
}

// checkWorkflowFleetEvents checks the handlers' events against the
// workflows: exactly-once runs (but for the SIGKILL) and the order of
// dependencies.
func checkWorkflowFleetEvents(t *testing.T, flows []*wfFlow, events []wfEvent, killed map[string]bool) {
	t.Helper()
	type key struct {
		flow int
		node string
	}
	byJob := map[int64]key{}
	flowOf := map[int]*wfFlow{}
	for _, f := range flows {
		flowOf[f.n] = f
		for name, id := range f.ids {
			byJob[id] = key{f.n, name}
		}
	}
	// ends[k]: the ends of k's executions, in the order they were written
	// per process; starts likewise.
	ends := map[key][]wfEvent{}
	starts := map[key][]wfEvent{}
	open := map[[2]any]wfEvent{} // (process, job) -> a start without its end yet
	interrupted := 0
	for _, e := range events {
		k, ok := byJob[e.Job]
		if !ok || k.node != e.Node || k.flow != e.Flow {
			t.Errorf("event %+v: job %d is %v", e, e.Job, k)
			continue
		}
		pk := [2]any{e.Process, e.Job}
		if !e.End {
			if _, dup := open[pk]; dup {
				t.Errorf("job %d (%v) started twice in %s at once", e.Job, k, e.Process)
			}
			open[pk] = e
			starts[k] = append(starts[k], e)
			continue
		}
		if _, ok := open[pk]; !ok {
			t.Errorf("job %d (%v): end in %s without a start", e.Job, k, e.Process)
		}
		delete(open, pk)
		ends[k] = append(ends[k], e)
	}
	for pk, e := range open {
		if !killed[pk[0].(string)] {
			t.Errorf("job %d (%s of flow %d) started in %s and never ended, in a process not killed", e.Job, e.Node, e.Flow, e.Process)
		}
		interrupted++
	}
	again, expired := 0, 0
	defer func() {
		t.Logf("%d events; the SIGKILL cut %d executions short; %d jobs completed by more than one attempt, "+
			"%d of them by two in surviving processes (a lease expired)", len(events), interrupted, again, expired)
	}()

	for _, f := range flows {
		for name, want := range f.want() {
			k := key{f.n, name}
			// Each attempt completes the job at most once, and a job
			// runs again only in a new attempt: after the SIGKILL (its
			// jobs rescued), or after a lease expired.
			okAttempts := map[int]int{}
			survivors := 0 // completing executions in processes not killed
			for _, e := range ends[k] {
				if e.OK {
					okAttempts[e.Attempt]++
					if !killed[e.Process] {
						survivors++
					}
				}
			}
			for a, n := range okAttempts {
				if n > 1 {
					t.Errorf("flow %d: %s: attempt %d completed by %d executions", f.n, name, a, n)
				}
			}
			switch {
			case want == redrive.Completed && len(okAttempts) == 0:
				t.Errorf("flow %d: %s is completed but no execution completed it", f.n, name)
			case want != redrive.Completed && len(okAttempts) > 0:
				t.Errorf("flow %d: %s is %s but %d executions completed it", f.n, name, want, len(okAttempts))
			case want == store.Blocked || want == redrive.Canceled:
				if len(starts[k]) > 0 {
					t.Errorf("flow %d: %s is %s but started %d times", f.n, name, want, len(starts[k]))
				}
			}
			if len(okAttempts) > 1 {
				again++
				if survivors > 1 {
					expired++
				}
			}
		}
		// No dependent started before each of its dependencies ended,
		// and, by the store when it started, completed (or died, under
		// run).
		for name, deps := range wfDeps {
			for _, s := range starts[key{f.n, name}] {
				for _, d := range deps {
					st := s.Deps[d]
					if st != redrive.Completed && !(f.policy == redrive.RunOnDead && st == redrive.Dead) {
						t.Errorf("flow %d (%s): %s started (in %s) with its dependency %s %q", f.n, f.policy, name, s.Process, d, st)
					}
					ended := false
					for _, e := range ends[key{f.n, d}] {
						if e.At < s.At && (e.OK || f.policy == redrive.RunOnDead) {
							ended = true
						}
					}
					if !ended {
						t.Errorf("flow %d (%s): %s started (in %s) before its dependency %s ended", f.n, f.policy, name, s.Process, d)
					}
				}
			}
		}
		// The success callback starts after every job ended.
		last := int64(0)
		for node := range wfDeps {
			for _, e := range ends[key{f.n, node}] {
				last = max(last, e.At)
			}
		}
		for _, s := range starts[key{f.n, "on_success"}] {
			if s.At < last {
				t.Errorf("flow %d (%s): on_success started before the last of its jobs ended", f.n, f.policy)
			}
		}
	}
}
