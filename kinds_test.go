package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestWorkerRecordsItsKinds: a running worker's registry entry names the
// kinds it has handlers for, and CheckKinds refuses a kind it does not
// run in a queue it serves.
func TestWorkerRecordsItsKinds(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	w := redrive.NewWorker(c, redrive.WorkerOptions{ID: "w", Logger: quietLogger(), Queues: map[string]int{"mail": 1}})
	nop := func(context.Context, *redrive.Job) error { return nil }
	w.HandleFunc("send.email", nop)
	w.HandleFunc("bounce", nop)
	rescues := redrive.RescueSignal(w)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	select { // the rescuer's first round comes after the registration
	case <-rescues:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start")
	}
	ws, err := c.Workers(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("Workers = %+v, %v", ws, err)
	}
	if got := fmt.Sprint(ws[0].Kinds); got != "[bounce send.email]" {
		t.Errorf("the worker recorded kinds %s, want [bounce send.email]", got)
	}
	if warns, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "send.email", Queue: "mail"}}); err != nil || warns[0] != "" {
		t.Errorf("CheckKinds(send.email in mail) = %q, %v; want accepted without a warning", warns, err)
	}
	_, err = c.CheckKinds(ctx, []redrive.Request{{Kind: "email", Queue: "mail"}})
	var ke *redrive.KindError
	if !errors.As(err, &ke) || !errors.Is(err, redrive.ErrInvalid) || ke.Kind != "email" || ke.Queue != "mail" ||
		fmt.Sprint(ke.Runs) != "[bounce send.email]" {
		t.Fatalf("CheckKinds(email in mail) = %v, want a KindError listing bounce and send.email", err)
	}
	if want := `no live worker runs kind "email" in queue "mail": its workers run bounce, send.email`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestCheckKinds: CheckKinds on a registry written by hand: which
// requests are refused, which accepted with a warning.
func TestCheckKinds(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	now := time.Now()

	// No worker at all: accepted, with a warning.
	warns, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "email"}})
	if err != nil || !strings.Contains(warns[0], "no live worker is registered") || !strings.Contains(warns[0], `"email"`) {
		t.Errorf("no worker: %q, %v; want a warning naming the kind", warns, err)
	}

	reg := func(w store.WorkerInfo) {
		t.Helper()
		w.Host, w.StartedAt = "h", now
		if w.HeartbeatAt.IsZero() {
			w.HeartbeatAt = now
		}
		if err := st.RegisterWorker(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	reg(store.WorkerInfo{ID: "a", Queues: map[string]int{"default": 1}, Kinds: []string{"http"}})
	reg(store.WorkerInfo{ID: "b", Queues: map[string]int{"default": 1, "mail": 1}, Kinds: []string{"download"}})
	// Not live: silent, or stopped. Their kinds do not count.
	reg(store.WorkerInfo{ID: "silent", Queues: map[string]int{"default": 1, "late": 1}, Kinds: []string{"email"},
		HeartbeatAt: now.Add(-redrive.WorkerSilentAfter - time.Minute)})
	reg(store.WorkerInfo{ID: "stopped", Queues: map[string]int{"default": 1}, Kinds: []string{"email"}})
	if err := st.StopWorker(ctx, "stopped", now, redrive.WorkerStopped); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		reqs []redrive.Request
		// refused: the index of the refused request (-1: accepted);
		// warn: the index of the request warned about (-1: none).
		refused, warn int
		runs          string
	}{
		{"the kind of one worker, the other's queue", []redrive.Request{{Kind: "http"}, {Kind: "download", Queue: "mail"}}, -1, -1, ""},
		{"a kind no live worker runs", []redrive.Request{{Kind: "email"}}, 0, -1, "[download http]"},
		{"a batch with one such job", []redrive.Request{{Kind: "http"}, {Kind: "http", Queue: "mail"}}, 1, -1, "[download]"},
		{"a queue no live worker serves", []redrive.Request{{Kind: "email", Queue: "late"}, {Kind: "http"}}, -1, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warns, err := c.CheckKinds(ctx, tc.reqs)
			if tc.refused < 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				for i, w := range warns {
					if (i == tc.warn) != (w != "") {
						t.Errorf("request %d: warning %q", i, w)
					}
				}
				return
			}
			var ke *redrive.KindError
			if !errors.As(err, &ke) || fmt.Sprint(ke.Runs) != tc.runs || ke.Kind != tc.reqs[tc.refused].Kind {
				t.Fatalf("err %v, want a KindError on %s, listing %s", err, tc.reqs[tc.refused].Kind, tc.runs)
			}
			var re *redrive.RequestError
			if len(tc.reqs) > 1 && (!errors.As(err, &re) || re.Index != tc.refused) {
				t.Errorf("err %v, want it to name request %d", err, tc.refused)
			}
		})
	}

	// A live worker that did not record its kinds (an older version) may
	// run any kind: nothing is refused on its account.
	reg(store.WorkerInfo{ID: "old", Queues: map[string]int{"default": 1}})
	if warns, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "email"}}); err != nil || warns[0] != "" {
		t.Errorf("with a worker of unknown kinds: %q, %v; want accepted", warns, err)
	}
}

// TestCheckKindsSeesNewWorkersAtOnce: a refusal is made on a fresh read
// of the registry, so a worker that registered after a check that
// accepted (and was cached) is seen by the next check.
func TestCheckKindsSeesNewWorkersAtOnce(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	now := time.Now()
	if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: "a", Queues: map[string]int{"default": 1}, Kinds: []string{"http"},
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "http"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "email"}}); err == nil {
		t.Fatal("email accepted before its worker started")
	}
	if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: "b", Queues: map[string]int{"default": 1}, Kinds: []string{"email"},
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	if warns, err := c.CheckKinds(ctx, []redrive.Request{{Kind: "email"}}); err != nil || warns[0] != "" {
		t.Errorf("email after its worker started: %q, %v; want accepted", warns, err)
	}
}

// TestEnqueueChecked: EnqueueChecked refuses a kind the live workers of
// the queue do not run and stores nothing, after the requests' own
// checks (a kind's validator speaks first: it says more), and sets the
// warning of a job no live worker's queue takes; EnqueueMany checks
// nothing.
func TestEnqueueChecked(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	now := time.Now()
	if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: "a", Queues: map[string]int{"default": 1}, Kinds: []string{"http"},
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	off := errors.New("the download kind is off")
	c.SetValidator("download", func(json.RawMessage) error { return off })
	if _, err := c.EnqueueChecked(ctx, []redrive.Request{{Kind: "download"}}); !errors.Is(err, off) {
		t.Errorf("download: %v, want the validator's refusal", err)
	}
	_, err := c.EnqueueChecked(ctx, []redrive.Request{{Kind: "http"}, {Kind: "email"}})
	var ke *redrive.KindError
	var re *redrive.RequestError
	if !errors.As(err, &ke) || !errors.As(err, &re) || re.Index != 1 {
		t.Errorf("batch with email: %v, want a KindError on request 1", err)
	}
	if n, _ := st.Count(ctx, store.Filter{}); n != 0 {
		t.Fatalf("%d jobs stored by refused enqueues", n)
	}
	jobs, err := c.EnqueueChecked(ctx, []redrive.Request{{Kind: "http"}, {Kind: "email", Queue: "later"}})
	if err != nil || jobs[0].Warning != "" || !strings.Contains(jobs[1].Warning, `no live worker serves queue "later"`) {
		t.Fatalf("EnqueueChecked = %+v, %v; want a warning on the second job only", jobs, err)
	}
	if got, _ := c.Get(ctx, jobs[1].ID); got.Warning != "" {
		t.Errorf("the warning was stored: %q", got.Warning)
	}
	if _, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "email"}}); err != nil {
		t.Errorf("EnqueueMany(email) = %v: the Go client checks no kind", err)
	}
}
