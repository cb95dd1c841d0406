package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  store.LimitRate
		field string // the field an error names; "" for none
	}{
		{"50/s", store.LimitRate{N: 50, Per: time.Second}, ""},
		{" 3 / 1m ", store.LimitRate{N: 3, Per: time.Minute}, ""},
		{"3/m", store.LimitRate{N: 3, Per: time.Minute}, ""},
		{"10/1.5s", store.LimitRate{N: 10, Per: 1500 * time.Millisecond}, ""},
		{"1/24h", store.LimitRate{N: 1, Per: 24 * time.Hour}, ""},
		{"1000/ms", store.LimitRate{N: 1000, Per: time.Millisecond}, ""},
		{"none", store.LimitRate{}, ""},
		{"", store.LimitRate{}, ""},
		{"50", store.LimitRate{}, "rate"},
		{"0/s", store.LimitRate{}, "rate"},
		{"-5/s", store.LimitRate{}, "rate"},
		{"x/s", store.LimitRate{}, "rate"},
		{"1001/ms", store.LimitRate{}, "rate"},
		{"5/fortnight", store.LimitRate{}, "interval"},
		{"5/0s", store.LimitRate{}, "interval"},
		{"5/-1s", store.LimitRate{}, "interval"},
		{"5/25h", store.LimitRate{}, "interval"},
		{"5/999us", store.LimitRate{}, "interval"},
		{"5/1ms1ns", store.LimitRate{}, "interval"},
	} {
		got, err := redrive.ParseRate(c.in)
		if c.field != "" {
			var fe *redrive.FieldError
			if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("ParseRate(%q) = %+v, %v; want ErrInvalid naming %s", c.in, got, err, c.field)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// FuzzParseRate: a rate either parses to one a store keeps (with a
// burst) and reads back as FormatRate writes it, or is refused with
// ErrInvalid naming rate or interval; nothing panics.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"50/s", "3/1m", "1/24h", "0/s", "5/0s", "1/", "/s", "1/1h1ns", "none", "9999999/h", "1e3/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := redrive.ParseRate(s)
		if err != nil {
			var fe *redrive.FieldError
			if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || (fe.Field != "rate" && fe.Field != "interval") {
				t.Fatalf("ParseRate(%q) = %v: not ErrInvalid naming rate or interval", s, err)
			}
			return
		}
		if r.N == 0 {
			return
		}
		r.Burst = 1
		if err := store.CheckLimitRate(r); err != nil {
			t.Fatalf("ParseRate(%q) = %+v, which no store keeps: %v", s, r, err)
		}
		back, err := redrive.ParseRate(redrive.FormatRate(r))
		back.Burst = 1
		if err != nil || back != r {
			t.Fatalf("ParseRate(FormatRate(%+v) = %q) = %+v, %v", r, redrive.FormatRate(r), back, err)
		}
	})
}

// TestSetLimitsRateInvalid: a limit with a bad rate or burst is refused
// with an error naming the field; the client's limits stay as they were,
// and the store's too.
func TestSetLimitsRateInvalid(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	good := []redrive.ConcurrencyLimit{{Name: "ok", Kind: "k", Rate: "5/s", Burst: 2}}
	if err := e.client.SetLimits(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l     redrive.ConcurrencyLimit
		field string
	}{
		{redrive.ConcurrencyLimit{Name: "a", Rate: "0/s"}, "rate"},
		{redrive.ConcurrencyLimit{Name: "a", Rate: "5/2d"}, "interval"},
		{redrive.ConcurrencyLimit{Name: "a", Rate: "5/48h"}, "interval"},
		{redrive.ConcurrencyLimit{Name: "a", Rate: "5/s", Burst: -1}, "burst"},
		{redrive.ConcurrencyLimit{Name: "a", Burst: 3, Max: 2}, "burst"},
		{redrive.ConcurrencyLimit{Name: "a"}, "max"},
	} {
		err := e.client.SetLimits([]redrive.ConcurrencyLimit{c.l})
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("SetLimits(%+v) = %v, want ErrInvalid naming %s", c.l, err, c.field)
		}
	}
	if got := e.client.Limits(); !slices.Equal(got, good) {
		t.Errorf("Limits() = %+v after refusals, want %+v", got, good)
	}
	for _, r := range []store.LimitRate{{N: -1, Per: time.Second}, {N: 1, Per: time.Hour * 25}, {N: 1, Per: time.Second, Burst: -2}, {Per: time.Second}} {
		if _, err := e.client.SetLimitRate(t.Context(), "x", r); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("SetLimitRate(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	// The store holds no limit: the refusals stored nothing (LimitStates
	// would also list the client's configured limit, stored or not).
	if ls, err := e.client.Store().ListLimits(t.Context(), time.Now()); err != nil || len(ls) != 0 {
		t.Errorf("the store's limits = %+v, %v; want none stored", ls, err)
	}
	// Nothing stored: the one limit listed is the configured one, not
	// kept yet, with its configured rate.
	if ls, err := e.client.LimitStates(t.Context()); err != nil || len(ls) != 1 || ls[0].Name != "ok" || !ls[0].Configured || ls[0].Max != 0 ||
		ls[0].Rate == nil || *ls[0].Rate != (store.LimitRate{N: 5, Per: time.Second, Burst: 2}) || !ls[0].UpdatedAt.IsZero() {
		t.Errorf("LimitStates = %+v (rate %v), %v; want only the configured limit ok, with its rate 5/s burst 2", ls, ratePtr(ls), err)
	}
	st, err := e.client.SetLimitRate(t.Context(), "x", store.LimitRate{N: 7, Per: time.Minute})
	if err != nil || st.Rate == nil || *st.Rate != (store.LimitRate{N: 7, Per: time.Minute, Burst: 1}) || st.Max != 0 {
		t.Errorf("SetLimitRate(7/m) = %+v, %v; want a rate of 7/m, burst 1, no max", st, err)
	}
}

// TestRateLimitWorkers: three Workers, on two handles of one store (two
// processes' worth), share a rate limit per key: every job runs at its
// first attempt, and the starts the store recorded (attempted_at, each
// set by the fetch that leased the job, across the workers) keep, per
// key, to at most burst + rate·t in every window. The rate makes the
// test take real time (about a second): that is what is tested, but no
// duration is asserted.
func TestRateLimitWorkers(t *testing.T) {
	a, b := openStorePair(t)
	const n, keys, burst = 60, 2, 3
	rate := store.LimitRate{N: 40, Per: time.Second, Burst: burst} // 25 ms apart
	limits := []redrive.ConcurrencyLimit{{Name: "per-key", Kind: "rated", Key: "payload.k", Rate: "40/s", Burst: burst}}
	var mu sync.Mutex
	started := map[int64]bool{}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var clients []*redrive.Client
	for i, st := range []store.Store{a, a, b} {
		c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
		if err := c.SetLimits(limits); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		w := redrive.NewWorker(c, redrive.WorkerOptions{ID: fmt.Sprint("w", i), Queues: map[string]int{redrive.DefaultQueue: 8}, Logger: quietLogger(),
			PollInterval: time.Second})
		redrive.Handle(w, "rated", func(ctx context.Context, j *redrive.Job, p struct{ K string }) error {
			mu.Lock()
			started[j.ID] = true
			mu.Unlock()
			return nil
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	var reqs []redrive.Request
	for i := range n {
		reqs = append(reqs, redrive.Request{Kind: "rated", Payload: map[string]string{"k": fmt.Sprint(i % keys)}})
	}
	jobs, err := clients[0].EnqueueMany(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "every rated job to complete", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(started) == n
	})
	starts := map[string][]int64{}
	for i, j := range jobs {
		got := waitJobState(t, clients[0], j.ID, redrive.Completed)
		if got.Attempt != 1 {
			t.Errorf("job %d completed at attempt %d, want 1: waiting on a rate uses no attempt", j.ID, got.Attempt)
		}
		k := fmt.Sprint(i % keys)
		starts[k] = append(starts[k], got.AttemptedAt.UnixMicro())
	}
	ti := rate.Interval().Microseconds()
	for k, s := range starts {
		slices.Sort(s)
		for i := range s {
			for j := i; j < len(s); j++ {
				if c, allowed := int64(j-i+1), int64(burst)+(s[j]-s[i])/ti; c > allowed {
					t.Fatalf("key %s: %d starts in %d µs, above burst %d + rate·t = %d", k, c, s[j]-s[i], burst, allowed)
				}
			}
		}
	}
	ls, err := clients[0].LimitStates(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Rate == nil || *ls[0].Rate != rate || ls[0].Throttled == 0 {
		t.Errorf("LimitStates = %+v, %v; want the rate %v and throttled starts", ls, err, rate)
	}
}

// waitJobState waits for job id to reach state and returns it.
func waitJobState(t *testing.T, c *redrive.Client, id int64, state redrive.State) *redrive.Job {
	t.Helper()
	var j *redrive.Job
	testwait.Until(t, fmt.Sprintf("job %d to be %s", id, state), 30*time.Second, func() bool {
		var err error
		j, err = c.Get(t.Context(), id)
		return err == nil && j.State == state
	})
	return j
}

// ratePtr returns the rate of the first limit of ls, for messages.
func ratePtr(ls []store.LimitState) *store.LimitRate {
	if len(ls) == 0 {
		return nil
	}
	return ls[0].Rate
}
