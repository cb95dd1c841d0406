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

func TestParseLimitKey(t *testing.T) {
	for _, c := range []struct {
		in   string
		want redrive.LimitKey
		bad  bool
	}{
		{in: ""},
		{in: "dependency", want: redrive.LimitKey{Source: "dependency"}},
		{in: "host", want: redrive.LimitKey{Source: "host"}},
		{in: "payload.customer_id", want: redrive.LimitKey{Source: "payload", Path: []string{"customer_id"}}},
		{in: "payload.account.id", want: redrive.LimitKey{Source: "payload", Path: []string{"account", "id"}}},
		{in: "payload", bad: true},
		{in: "payload.", bad: true},
		{in: "payload.a..b", bad: true},
		{in: "payload.a b", bad: true},
		{in: "customer_id", bad: true},
		{in: "Host", bad: true},
		{in: "payload.a.b.c.d.e.f.g.h.i", bad: true},
	} {
		got, err := redrive.ParseLimitKey(c.in)
		if c.bad {
			if !errors.Is(err, redrive.ErrInvalid) {
				t.Errorf("ParseLimitKey(%q) = %+v, %v; want ErrInvalid", c.in, got, err)
			}
			continue
		}
		if err != nil || got.Source != c.want.Source || !slices.Equal(got.Path, c.want.Path) || got.String() != c.in {
			t.Errorf("ParseLimitKey(%q) = %+v (%q), %v; want %+v", c.in, got, got.String(), err, c.want)
		}
	}
}

// FuzzParseLimitKey: a key either parses and reads back as written, or is
// refused with ErrInvalid; nothing panics.
func FuzzParseLimitKey(f *testing.F) {
	for _, s := range []string{"", "host", "dependency", "payload.a", "payload.a.b", "payload..", "payload.\x00", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := redrive.ParseLimitKey(s)
		if err != nil {
			if !errors.Is(err, redrive.ErrInvalid) {
				t.Fatalf("ParseLimitKey(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParseLimitKey(%q).String() = %q", s, k.String())
		}
	})
}

// TestLimitOfJob: the client puts a job under the first limit selecting
// it, its group read from the job; a job whose group cannot be read is
// refused, naming the field, and nothing is enqueued.
func TestLimitOfJob(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	err := c.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "crm", Kind: "crm", Key: "payload.account.id", Max: 5},
		{Name: "hosts", Kind: "http", Key: "host", Max: 2},
		{Name: "deps", Queue: "calls", Key: "dependency", Max: 3},
		{Name: "mail", Queue: "mail", Max: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		r          redrive.Request
		limit, key string
		max        int
		badField   string
	}{
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": map[string]any{"id": "A-1"}}}, limit: "crm", key: "A-1", max: 5},
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": map[string]any{"id": 42}}}, limit: "crm", key: "42", max: 5},
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": map[string]any{"id": true}}}, limit: "crm", key: "true", max: 5},
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": map[string]any{}}}, badField: "payload.account.id"},
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": "x"}}, badField: "payload.account.id"},
		{r: redrive.Request{Kind: "crm", Payload: map[string]any{"account": map[string]any{"id": nil}}}, badField: "payload.account.id"},
		{r: redrive.Request{Kind: "http", Payload: map[string]any{"url": "https://API.Example.com:8443/x"}}, limit: "hosts", key: "api.example.com", max: 2},
		{r: redrive.Request{Kind: "http", Payload: map[string]any{"method": "GET"}}, badField: "payload.url"},
		{r: redrive.Request{Kind: "x", Queue: "calls", Dependency: "pay"}, limit: "deps", key: "pay", max: 3},
		{r: redrive.Request{Kind: "x", Queue: "mail"}, limit: "mail", max: 10},
		{r: redrive.Request{Kind: "x"}},
	} {
		nj, err := c.Prepare(tc.r, now)
		if tc.badField != "" {
			var fe *redrive.FieldError
			if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.badField {
				t.Errorf("Prepare(%+v) = %v, want ErrInvalid naming %s", tc.r, err, tc.badField)
			}
			if _, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "ok"}, tc.r}); !errors.Is(err, redrive.ErrInvalid) {
				t.Errorf("EnqueueMany(%+v) = %v, want ErrInvalid", tc.r, err)
			}
			continue
		}
		if err != nil || nj.Limit != tc.limit || nj.LimitKey != tc.key || nj.LimitMax != tc.max {
			t.Errorf("Prepare(%+v) = limit %q key %q max %d, %v; want %q %q %d", tc.r, nj.Limit, nj.LimitKey, nj.LimitMax, err, tc.limit, tc.key, tc.max)
		}
	}
	if n, err := c.Count(t.Context(), redrive.Filter{}); err != nil || n != 0 {
		t.Errorf("Count = %d, %v after refused enqueues, want 0", n, err)
	}
}

// TestSetLimitsInvalid: a bad limit is refused naming its field, and the
// client's limits stay as they were.
func TestSetLimitsInvalid(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	good := []redrive.ConcurrencyLimit{{Name: "a", Max: 1}}
	if err := c.SetLimits(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l     redrive.ConcurrencyLimit
		field string
	}{
		{redrive.ConcurrencyLimit{Max: 1}, "name"},
		{redrive.ConcurrencyLimit{Name: "x/y", Max: 1}, "name"},
		{redrive.ConcurrencyLimit{Name: "x", Max: 0}, "max"},
		{redrive.ConcurrencyLimit{Name: "x", Max: -2}, "max"},
		{redrive.ConcurrencyLimit{Name: "x", Max: store.MaxLimit + 1}, "max"},
		{redrive.ConcurrencyLimit{Name: "x", Max: 1, Key: "customer_id"}, "key"},
		{redrive.ConcurrencyLimit{Name: "x", Max: 1, Queue: " q"}, "queue"},
		{redrive.ConcurrencyLimit{Name: "x", Max: 1, Kind: "a\tb"}, "kind"},
		{redrive.ConcurrencyLimit{Name: "a", Max: 1}, "name"}, // twice
	} {
		err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "a", Max: 1}, tc.l})
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("SetLimits(%+v) = %v, want ErrInvalid naming %s", tc.l, err, tc.field)
		}
	}
	if got := c.Limits(); !slices.Equal(got, good) {
		t.Errorf("Limits = %+v after refused lists, want %+v", got, good)
	}
	if _, err := c.SetLimitMax(t.Context(), "a", 0); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("SetLimitMax(0) = %v, want ErrInvalid", err)
	}
}

// TestLimitsEngine: a worker with room for 8 jobs at once runs at most 2
// of one key at once, uses no attempt for the waits, and runs them all.
func TestLimitsEngine(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 8}})
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "k", Kind: "lim", Key: "payload.k", Max: 2}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	release := make(chan struct{})
	redrive.Handle(e.worker, "lim", func(ctx context.Context, j *redrive.Job, p struct{ K string }) error {
		mu.Lock()
		running[p.K]++
		peak[p.K] = max(peak[p.K], running[p.K])
		mu.Unlock()
		<-release
		mu.Lock()
		running[p.K]--
		mu.Unlock()
		return nil
	})
	var reqs []redrive.Request
	for i := range 20 {
		reqs = append(reqs, redrive.Request{Kind: "lim", Payload: map[string]string{"k": fmt.Sprint(i % 2)}})
	}
	jobs, err := e.client.EnqueueMany(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	// Both keys fill their 2 slots; nothing more starts while they hold.
	testwait.Until(t, "2 jobs of each key to run", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["0"] == 2 && running["1"] == 2
	})
	ls, err := e.client.LimitStates(t.Context())
	if err != nil || len(ls) != 1 || ls[0].InUse != 4 || ls[0].Busiest != 2 || ls[0].Waiting != 16 {
		t.Errorf("LimitStates = %+v, %v; want 4 in use, busiest 2, 16 waiting", ls, err)
	}
	close(release)
	for _, j := range jobs {
		got := e.waitState(j.ID, redrive.Completed)
		if got.Attempt != 1 {
			t.Errorf("job %d completed at attempt %d, want 1: waiting on a slot uses no attempt", j.ID, got.Attempt)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if peak["0"] > 2 || peak["1"] > 2 {
		t.Errorf("peak running per key = %v, want at most 2", peak)
	}
}
