package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// Worker process modes: the handlers a worker process registers.
const (
	ModeThroughput = "throughput"
	ModeLateness   = "lateness"
)

// doneReportInterval is how often a throughput worker process reports its
// handler count (with the exact time of its last handler call, so the
// interval does not blur the measured work time).
const doneReportInterval = 2 * time.Millisecond

// WorkerProcess describes one worker process of a multi-process workload:
// the PostgreSQL schema it works on and the handlers it runs.
type WorkerProcess struct {
	DatabaseURL string
	Schema      string
	// SQLitePath, when set, is the SQLite database the process works on
	// instead of PostgreSQL (the rate workload's processes on one file).
	SQLitePath string
	// Mode is ModeThroughput (no-op handlers) or ModeLateness (fail once,
	// then succeed; RetryDelay is the one retry's delay).
	Mode        string
	Workers     int
	FetchBatch  int
	RetryBudget bool
	RetryDelay  time.Duration
}

// Args returns the command-line flags that describe the process, in the
// form `redrive bench worker` parses them.
func (p WorkerProcess) Args() []string {
	args := []string{
		"--database-url", p.DatabaseURL,
		"--schema", p.Schema,
		"--mode", p.Mode,
		"--workers", strconv.Itoa(p.Workers),
		"--fetch-batch", strconv.Itoa(p.FetchBatch),
		"--retry-budget=" + strconv.FormatBool(p.RetryBudget),
		"--retry-delay", p.RetryDelay.String(),
	}
	if p.SQLitePath != "" {
		args = append(args, "--sqlite-path", p.SQLitePath)
	}
	return args
}

// ServeWorker is the body of one worker process. It opens the store
// (already migrated by the benchmark), registers the mode's handler and
// speaks a line protocol with the benchmark process: it writes "ready",
// starts the worker when it reads "go", writes one line per event (see
// below) and, when its input ends, shuts the worker down gracefully,
// writes "stopped" and returns.
//
// Events: ModeThroughput writes "done <count> <unix ns of the last
// handler call>" every 2ms while the count moves; ModeLateness writes
// "pickup <ns>" (first attempt's start minus enqueue), "fail <job id>
// <unix ns>" when a first attempt returns its error and "retry <job id>
// <unix ns of the start> <ns late vs due time>" on the retry.
func ServeWorker(ctx context.Context, p WorkerProcess, in io.Reader, out io.Writer, errLog io.Writer) error {
	if p.Mode != ModeThroughput && p.Mode != ModeLateness && p.Mode != ModeRate {
		return fmt.Errorf("bench: worker: mode %q: want %s, %s or %s", p.Mode, ModeThroughput, ModeLateness, ModeRate)
	}
	log := slog.New(slog.NewTextHandler(errLog, &slog.HandlerOptions{Level: slog.LevelError}))
	var st store.Store
	var err error
	if p.SQLitePath != "" {
		st, err = sqlite.Open(ctx, p.SQLitePath, sqlite.Options{Logger: log})
	} else {
		st, err = postgres.Open(ctx, p.DatabaseURL, postgres.Options{Schema: p.Schema, Logger: log, SkipMigrate: true})
	}
	if err != nil {
		return err
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	opts := redrive.WorkerOptions{
		Queues:             map[string]int{redrive.DefaultQueue: p.Workers},
		FetchBatch:         p.FetchBatch,
		DisableRetryBudget: !p.RetryBudget,
		Logger:             log,
	}
	var mu sync.Mutex // serializes the writes on out
	emit := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		mu.Unlock()
	}
	var count, last atomic.Int64
	var w *redrive.Worker
	switch p.Mode {
	case ModeThroughput:
		w = redrive.NewWorker(client, opts)
		redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
			last.Store(time.Now().UnixNano())
			count.Add(1)
			return nil
		})
	case ModeRate:
		w = redrive.NewWorker(client, opts)
		redrive.Handle(w, rateKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
			now := time.Now().UnixNano()
			at := now
			if job.AttemptedAt != nil {
				at = job.AttemptedAt.UnixNano()
			}
			emit("start %d %d", now, at)
			return nil
		})
	case ModeLateness:
		pol := latenessPolicy(p.RetryDelay)
		opts.Policy = &pol
		w = redrive.NewWorker(client, opts)
		redrive.Handle(w, failKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
			now := time.Now()
			if job.Attempt == 1 {
				emit("pickup %d", now.Sub(job.CreatedAt))
				emit("fail %d %d", job.ID, time.Now().UnixNano())
				return redrive.Transient(errPlanned)
			}
			emit("retry %d %d %d", job.ID, now.UnixNano(), now.Sub(job.RunAt))
			return nil
		})
	}
	emit("ready")
	lines := bufio.NewScanner(in)
	if !lines.Scan() || lines.Text() != "go" {
		return errors.New("bench: worker: the benchmark process did not say go")
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(wctx) }()
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		if p.Mode != ModeThroughput {
			<-wctx.Done()
			return
		}
		tick := time.NewTicker(doneReportInterval)
		defer tick.Stop()
		var sent int64
		report := func() {
			if n := count.Load(); n != sent {
				emit("done %d %d", n, last.Load())
				sent = n
			}
		}
		for {
			select {
			case <-tick.C:
				report()
			case <-wctx.Done():
				report()
				return
			}
		}
	}()
	for lines.Scan() { // until the benchmark closes our input
	}
	stop()
	err = <-runErr
	<-reported
	emit("stopped")
	return err
}

// latenessPolicy is the lateness workload's policy: one retry after
// delay, no jitter.
func latenessPolicy(delay time.Duration) retry.Policy {
	p := retry.DefaultPolicy()
	p.MaxRetries = 1
	p.Initial, p.MaxDelay = delay, delay
	p.Jitter = retry.JitterNone
	return p
}

// procs are the worker processes of one workload.
type procs struct {
	cmds    []*exec.Cmd
	stdins  []io.WriteCloser
	readers sync.WaitGroup
	ready   chan int
	stopped atomic.Int64
	waited  bool
}

// startProcs starts cfg.Processes worker processes described by p and
// waits until each has opened the store and is ready. onLine receives
// every event line of process i, concurrently from one goroutine per
// process.
func startProcs(ctx context.Context, cfg Config, p WorkerProcess, onLine func(i int, fields []string)) (*procs, error) {
	ps := &procs{ready: make(chan int, cfg.Processes)}
	for i := range cfg.Processes {
		cmd, err := cfg.Spawn(ctx, p.Args())
		if err != nil {
			ps.kill()
			return nil, fmt.Errorf("bench: worker process: %w", err)
		}
		cmd.Stderr = cfg.ErrorLog
		stdin, err := cmd.StdinPipe()
		if err != nil {
			ps.kill()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			ps.kill()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			ps.kill()
			return nil, fmt.Errorf("bench: start worker process: %w", err)
		}
		ps.cmds, ps.stdins = append(ps.cmds, cmd), append(ps.stdins, stdin)
		ps.readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			ready := false
			defer func() {
				if !ready {
					ps.ready <- -1
				}
			}()
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				switch {
				case len(fields) == 0:
				case fields[0] == "ready" && !ready:
					ready = true
					ps.ready <- i
				case fields[0] == "stopped":
					ps.stopped.Add(1)
				default:
					onLine(i, fields)
				}
			}
		})
	}
	timeout := time.After(cfg.StallTimeout)
	for range cfg.Processes {
		select {
		case i := <-ps.ready:
			if i < 0 {
				ps.kill()
				return nil, errors.New("bench: a worker process ended before it was ready (its errors are above)")
			}
		case <-timeout:
			ps.kill()
			return nil, fmt.Errorf("bench: the worker processes were not ready within %s", cfg.StallTimeout)
		case <-ctx.Done():
			ps.kill()
			return nil, ctx.Err()
		}
	}
	return ps, nil
}

// start tells every process to start its worker.
func (ps *procs) start() error {
	for _, in := range ps.stdins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			return fmt.Errorf("bench: start a worker process: %w", err)
		}
	}
	return nil
}

// stop closes the processes' input, so that they shut their workers down
// gracefully, and waits for them to exit.
func (ps *procs) stop() error {
	if ps.waited {
		return nil
	}
	ps.waited = true
	for _, in := range ps.stdins {
		in.Close()
	}
	ps.readers.Wait()
	var errs []error
	for i, cmd := range ps.cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("bench: worker process %d: %w", i, err))
		}
	}
	if n := ps.stopped.Load(); len(errs) == 0 && n != int64(len(ps.cmds)) {
		errs = append(errs, fmt.Errorf("bench: %d of %d worker processes stopped cleanly", n, len(ps.cmds)))
	}
	return errors.Join(errs...)
}

// kill ends the processes started so far (after a failure).
func (ps *procs) kill() {
	if ps.waited {
		return
	}
	ps.waited = true
	for i, cmd := range ps.cmds {
		ps.stdins[i].Close()
		cmd.Process.Kill()
	}
	ps.readers.Wait()
	for _, cmd := range ps.cmds {
		cmd.Wait()
	}
}

// workerProcess describes the worker processes of r's workload.
func (r *rig) workerProcess(mode string, retryDelay time.Duration) WorkerProcess {
	return WorkerProcess{DatabaseURL: r.cfg.DatabaseURL, Schema: r.pg.Schema(), Mode: mode, Workers: r.cfg.Workers,
		FetchBatch: r.cfg.FetchBatch, RetryBudget: r.cfg.RetryBudget, RetryDelay: retryDelay}
}
