package redrive_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The fleet limit test: 3 worker processes (this test binary, re-executed)
// share a concurrency limit of 5 per customer (a payload field) while one
// of them is SIGKILLed mid-run. Each handler reports its start and end to
// the parent, with its own clock reading; the parent then sweeps the
// records: at no instant do more than 5 jobs of one customer run (a
// killed process's unfinished jobs count as running until the parent saw
// it dead), and every job completes.

const (
	limitFleetStoreEnv = "REDRIVE_LIMIT_FLEET_STORE" // "sqlite:<path>" or "postgres:<schema>"
	limitFleetRecEnv   = "REDRIVE_LIMIT_FLEET_REC"   // the parent's recorder URL
	limitFleetIDEnv    = "REDRIVE_LIMIT_FLEET_ID"
	limitFleetMax      = 5
	limitFleetJobs     = 600
	limitFleetKeys     = 4
)

// limitFleetLimits is the limit every process, and the parent's
// enqueues, share.
func limitFleetLimits() []redrive.ConcurrencyLimit {
	return []redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "lim", Key: "payload.customer", Max: limitFleetMax}}
}

// limitRec is one start or end a handler reports.
type limitRec struct {
	Process string `json:"p"`
	Job     int64  `json:"job"`
	Key     string `json:"key"`
	End     bool   `json:"end"`
	At      int64  `json:"at"` // UnixNano, the child's clock
}

// TestLimitFleetChild is a worker process of the fleet limit tests; it
// does nothing in a normal run. It works until SIGTERM or SIGKILL.
func TestLimitFleetChild(t *testing.T) {
	spec := os.Getenv(limitFleetStoreEnv)
	if spec == "" {
		return // only does something as a child process of the tests below
	}
	id, rec := os.Getenv(limitFleetIDEnv), os.Getenv(limitFleetRecEnv)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", id)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := openLimitFleetStore(ctx, spec, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	if err := c.SetLimits(limitFleetLimits()); err != nil {
		t.Fatal(err)
	}
	// A lease of 5 s: a worker bounds each fetch by its lease, and with
	// 1 s leases a loaded machine (-race beside other test binaries) made
	// every SQLite fetch of a process time out, and heartbeats late, for
	// minutes: leases expired, jobs were rescued and run again, and the
	// run never ended. A killed process's jobs are rescued at once anyway:
	// its process is seen gone on this host.
	w := redrive.NewWorker(c, redrive.WorkerOptions{
		ID: id, Queues: map[string]int{redrive.DefaultQueue: 16}, Logger: log,
		LeaseDuration: 5 * time.Second, RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond,
	})
	client := &http.Client{Timeout: 10 * time.Second}
	report := func(r limitRec) error {
		r.Process, r.At = id, time.Now().UnixNano()
		b, _ := json.Marshal(r)
		resp, err := client.Post(rec, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	type payload struct {
		Customer string `json:"customer"`
	}
	work := func(ctx context.Context, j *redrive.Job, p payload) error {
		key := p.Customer
		if j.Kind == "free" {
			key = "free:" + key
		}
		if err := report(limitRec{Job: j.ID, Key: key}); err != nil {
			return err
		}
		select { // the handler's own work, in real time
		case <-time.After(time.Duration(5+j.ID%20) * time.Millisecond):
		case <-ctx.Done():
		}
		return report(limitRec{Job: j.ID, Key: key, End: true})
	}
	redrive.Handle(w, "lim", work)
	redrive.Handle(w, "free", work)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func openLimitFleetStore(ctx context.Context, spec string, log *slog.Logger) (store.Store, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "sqlite":
		return sqlite.Open(ctx, arg, sqlite.Options{Logger: log})
	case "postgres":
		return postgres.Open(ctx, os.Getenv(pgURLEnv), postgres.Options{Schema: arg, MaxConns: 6, Logger: log})
	}
	return nil, fmt.Errorf("unknown store %q", spec)
}

// limitRecorder keeps the records the children send.
type limitRecorder struct {
	mu   sync.Mutex
	recs []limitRec
	ends int
}

func (r *limitRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var rec limitRec
	if err := json.NewDecoder(req.Body).Decode(&rec); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	if rec.End {
		r.ends++
	}
	r.mu.Unlock()
}

func (r *limitRecorder) endCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ends
}

func TestLimitFleetSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	path := filepath.Join(t.TempDir(), "limits.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testLimitFleet(t, st, "sqlite:"+path)
}

func TestLimitFleetPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	url := pgTestURL(t)
	st, schema := pgFreshSchema(t, url, "limits_")
	testLimitFleet(t, st, "postgres:"+schema)
}

func testLimitFleet(t *testing.T, st store.Store, spec string) {
	ctx := t.Context()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits(limitFleetLimits()); err != nil {
		t.Fatal(err)
	}
	var reqs []redrive.Request
	for i := range limitFleetJobs {
		kind := "lim"
		if i%5 == 4 {
			kind = "free"
		}
		reqs = append(reqs, redrive.Request{Kind: kind, Payload: map[string]string{"customer": fmt.Sprint("c", i%limitFleetKeys)}})
	}
	if _, err := c.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	rec := &limitRecorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()

	type child struct {
		id  string
		cmd *exec.Cmd
		out *os.File
	}
	killedAt := map[string]int64{} // process -> when the parent saw it dead (UnixNano)
	var children []*child
	for i := range 3 {
		ch := &child{id: fmt.Sprint("p", i)}
		ch.cmd = exec.Command(os.Args[0], "-test.run=^TestLimitFleetChild$", "-test.count=1")
		ch.cmd.Env = append(os.Environ(), limitFleetStoreEnv+"="+spec, limitFleetRecEnv+"="+srv.URL, limitFleetIDEnv+"="+ch.id)
		ch.out, _ = os.CreateTemp(t.TempDir(), "child")
		ch.cmd.Stdout, ch.cmd.Stderr = ch.out, ch.out
		if err := ch.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, ch)
	}
	defer func() {
		for _, ch := range children {
			if _, dead := killedAt[ch.id]; !dead {
				ch.cmd.Process.Signal(syscall.SIGTERM)
				ch.cmd.Wait()
			}
			if t.Failed() {
				b, _ := os.ReadFile(ch.out.Name())
				t.Logf("child %s output:\n%s", ch.id, b)
			}
		}
	}()
	// SIGKILL one process once a quarter of the jobs ended.
	testwait.Until(t, "a quarter of the jobs to end", 2*time.Minute, func() bool { return rec.endCount() >= limitFleetJobs/4 })
	victim := children[0]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.cmd.Wait()
	killedAt[victim.id] = time.Now().UnixNano()
	t.Logf("killed %s after %d ends", victim.id, rec.endCount())

	testwait.Progress(t, "every job to complete", 3*time.Minute, func() (int64, bool) {
		n, err := c.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Completed}})
		if err != nil {
			t.Fatal(err)
		}
		return int64(n), n == limitFleetJobs
	})
	rec.mu.Lock()
	recs := slices.Clone(rec.recs)
	rec.mu.Unlock()
	peak := limitFleetSweep(t, recs, killedAt)
	t.Logf("%d records; the busiest customer ran %d jobs at once (limit %d)", len(recs), peak, limitFleetMax)
	if peak > limitFleetMax {
		t.Errorf("a customer ran %d jobs at once, limit %d", peak, limitFleetMax)
	}
	ls, err := c.LimitStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].InUse != 0 || ls[0].Waiting != 0 {
		t.Errorf("limits at the end = %+v, want one, nothing in use or waiting", ls)
	}
}

// limitFleetSweep returns the most jobs of one key (of the limited kind)
// running at once by the records: a start without an end ends when the
// parent saw its process dead. Only records of the limited kind count:
// their keys are those of the limit (the free jobs carry keys too, and
// are reported under "free:").
func limitFleetSweep(t *testing.T, recs []limitRec, killedAt map[string]int64) int {
	type span struct {
		key        string
		start, end int64
	}
	open := map[[2]string]limitRec{} // (process, job) -> start
	var spans []span
	for _, r := range recs {
		k := [2]string{r.Process, strconv.FormatInt(r.Job, 10)}
		if !r.End {
			open[k] = r
			continue
		}
		s, ok := open[k]
		if !ok {
			t.Errorf("end of job %d in %s without a start", r.Job, r.Process)
			continue
		}
		delete(open, k)
		spans = append(spans, span{key: s.Key, start: s.At, end: r.At})
	}
	for k, s := range open {
		end, killed := killedAt[k[0]]
		if !killed {
			t.Errorf("job %d in %s started and never ended, in a process not killed", s.Job, s.Process)
			continue
		}
		spans = append(spans, span{key: s.Key, start: s.At, end: end})
	}
	type ev struct {
		at    int64
		delta int
	}
	byKey := map[string][]ev{}
	for _, s := range spans {
		byKey[s.key] = append(byKey[s.key], ev{s.start, 1}, ev{s.end, -1})
	}
	peak := 0
	for key, evs := range byKey {
		if strings.HasPrefix(key, "free:") {
			continue
		}
		// Ends before starts at one instant: a job that ends as another
		// starts did not overlap it.
		slices.SortFunc(evs, func(a, b ev) int {
			if c := cmp.Compare(a.at, b.at); c != 0 {
				return c
			}
			return cmp.Compare(a.delta, b.delta)
		})
		n := 0
		for _, e := range evs {
			n += e.delta
			peak = max(peak, n)
		}
	}
	return peak
}
