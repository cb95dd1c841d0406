package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store/sqlite"
)

// diffCase is a handler and a job, run through a real Worker and through
// a Runner. fail tells the handler what to do on attempt n (1-based,
// counting every call, snoozes included).
type diffCase struct {
	name    string
	kind    string
	payload any
	opts    []redrive.Option
	hopts   []redrive.HandlerOption
	typed   bool // registered with redrive.Handle on struct{ N int }
	none    bool // no handler registered for the kind
	fail    func(ctx context.Context, call int) error
}

// diffPolicies are short, so that the worker's real retries take
// milliseconds; each kind of jitter draws from the source.
var (
	diffDefault = retry.Policy{MaxRetries: 4, Initial: 2 * time.Millisecond, Multiplier: 2, MaxDelay: 20 * time.Millisecond,
		Jitter: retry.JitterFull, RetryAfterJitter: 5 * time.Millisecond}
	diffQueue = retry.Policy{MaxRetries: 2, Initial: 3 * time.Millisecond, Multiplier: 1, MaxDelay: 3 * time.Millisecond,
		Jitter: retry.JitterNone}
	diffKind = retry.Policy{MaxRetries: 3, Initial: time.Millisecond, Multiplier: 3, MaxDelay: 15 * time.Millisecond,
		Jitter: retry.JitterDecorrelated}
)

func diffCases() []diffCase {
	errDown := errors.New("connection refused")
	failN := func(n int, err error) func(context.Context, int) error {
		return func(_ context.Context, call int) error {
			if call <= n {
				return err
			}
			return nil
		}
	}
	return []diffCase{
		{name: "success", kind: "ok", fail: failN(0, nil)},
		{name: "transient then success", kind: "flaky", fail: failN(2, errDown)},
		{name: "exhausted", kind: "down", fail: failN(100, errDown)},
		{name: "max retries option", kind: "down2", opts: []redrive.Option{redrive.MaxRetries(1)}, fail: failN(100, errDown)},
		{name: "job policy", kind: "down3", opts: []redrive.Option{redrive.WithPolicy(diffKind)}, fail: failN(100, errDown)},
		{name: "wrapped permanent", kind: "perm", fail: failN(100, fmt.Errorf("charge: %w", redrive.Permanent(errors.New("card declined"))))},
		{name: "retry-after", kind: "limited", fail: failN(2, &failure.Error{Class: failure.RateLimited, RetryAfter: 7 * time.Millisecond,
			Err: errors.New("429")})},
		{name: "snooze", kind: "snooze", fail: failN(2, redrive.Snooze(3*time.Millisecond))},
		{name: "panic", kind: "panic", fail: func(_ context.Context, call int) error {
			if call == 1 {
				panic("boom")
			}
			return nil
		}},
		{name: "queue policy", kind: "inq2", opts: []redrive.Option{redrive.InQueue("q2")}, fail: failN(100, errDown)},
		{name: "kind policy", kind: "kindpol", hopts: []redrive.HandlerOption{redrive.Policy(diffKind)}, fail: failN(100, errDown)},
		{name: "timeout", kind: "slow", hopts: []redrive.HandlerOption{redrive.Timeout(5 * time.Millisecond)},
			fail: func(ctx context.Context, call int) error {
				if call == 1 {
					<-ctx.Done() // the handler's real timeout ends the attempt
					return ctx.Err()
				}
				return nil
			}},
		{name: "undecodable payload", kind: "typed", typed: true, payload: map[string]any{"N": "x"}, fail: failN(0, nil)},
		{name: "no handler", kind: "orphan", none: true},
		{name: "progress", kind: "progress", fail: func(ctx context.Context, call int) error {
			redrive.Progress(ctx, int64(call*3), 10)
			if call == 1 {
				return errDown // a retry clears the progress
			}
			return nil
		}},
		{name: "typed ok", kind: "typed2", typed: true, payload: map[string]any{"N": 1}, fail: failN(0, nil)},
	}
}

// register registers c's handler with r, counting calls in calls.
func (c *diffCase) register(r redrive.Registrar, calls *atomic.Int32) {
	if c.none {
		return
	}
	if c.typed {
		redrive.Handle(r, c.kind, func(ctx context.Context, job *redrive.Job, args struct{ N int }) error {
			return c.fail(ctx, int(calls.Add(1)))
		}, c.hopts...)
		return
	}
	r.HandleFunc(c.kind, func(ctx context.Context, job *redrive.Job) error {
		return c.fail(ctx, int(calls.Add(1)))
	}, c.hopts...)
}

// attemptSummary is what the differential compares of each history event.
type attemptSummary struct {
	Kind    string
	Attempt int
	Class   string
	Reason  string
	Delay   time.Duration
}

func summarize(j *redrive.Job) (string, []attemptSummary) {
	var s []attemptSummary
	for _, e := range j.History {
		d := time.Duration(e.Delay)
		s = append(s, attemptSummary{Kind: string(e.Kind), Attempt: e.Attempt, Class: e.Class, Reason: e.Reason, Delay: d})
	}
	msg, _, _ := strings.Cut(j.LastError, "\n") // a panic's stack differs
	progress := "none"
	if p := j.Progress; p != nil {
		progress = fmt.Sprintf("%d/%d", p.Done, p.Total)
	}
	head := fmt.Sprintf("state %s attempt %d retries %d class %q dead %q last_delay %v error %q progress %s",
		j.State, j.Attempt, j.RetryCount, j.LastErrorClass, j.DeadReason, time.Duration(j.LastDelay), msg, progress)
	return head, s
}

// The same handlers and jobs, one job at a time, through a Worker on
// SQLite and through a Runner, with jitter drawn from sources of the same
// seed: the jobs end in the same state after the same attempts, with the
// same classes, reasons and delays.
func TestRunnerAgreesWithWorker(t *testing.T) {
	const seed = 7
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	qp := map[string]retry.Policy{"q2": diffQueue}
	w := redrive.NewWorker(client, redrive.WorkerOptions{ID: "redrivetest", Queues: map[string]int{"default": 1, "q2": 1}, Policy: &diffDefault,
		QueuePolicies: qp, DisableRetryBudget: true, Rand: NewSource(seed), Logger: quiet, PollInterval: 5 * time.Millisecond})
	r := NewRunner(Options{Seed: seed, Executor: redrive.ExecutorOptions{Policy: &diffDefault, QueuePolicies: qp, DisableRetryBudget: true}})
	cases := diffCases()
	wcalls := make([]atomic.Int32, len(cases))
	rcalls := make([]atomic.Int32, len(cases))
	for i := range cases {
		cases[i].register(w, &wcalls[i])
		cases[i].register(r, &rcalls[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	}()
	for i := range cases {
		c := &cases[i]
		job, err := client.Enqueue(ctx, c.kind, c.payload, c.opts...)
		if err != nil {
			t.Fatalf("%s: enqueue: %v", c.name, err)
		}
		var got *redrive.Job
		testwait.Until(t, c.name+": the worker ends the job", time.Minute, func() bool {
			got, err = client.Get(ctx, job.ID)
			return err == nil && done2(got.State)
		})
		all := r.WorkUntilDone(t, c.kind, c.payload, c.opts...)
		wantHead, want := summarize(got)
		gotHead, have := summarize(all[len(all)-1].Job)
		if wantHead != gotHead {
			t.Errorf("%s:\n worker %s\n runner %s", c.name, wantHead, gotHead)
		}
		if fmt.Sprint(want) != fmt.Sprint(have) {
			t.Errorf("%s: history\n worker %v\n runner %v", c.name, want, have)
		}
		if wcalls[i].Load() != rcalls[i].Load() {
			t.Errorf("%s: the worker called the handler %d times, the runner %d", c.name, wcalls[i].Load(), rcalls[i].Load())
		}
	}
}

func done2(s redrive.State) bool { return done(s) }
