package transport

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

func TestKeeperCountersStore(t *testing.T) {
	var c KeeperCounters
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a keeper shutting down: the store call still runs
	add := func(ctx context.Context, jobs []store.DeadJob) ([]*store.Job, error) {
		if ctx.Err() != nil {
			t.Fatal("the store call was canceled with the keeper's context")
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Fatal("the store call is not bounded")
		}
		return []*store.Job{{ID: 1}, {ID: 2, Existing: true}, {ID: 3}}, nil
	}
	if _, err := c.Store(ctx, add, make([]store.DeadJob, 3)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if _, err := c.Store(ctx, func(context.Context, []store.DeadJob) ([]*store.Job, error) { return nil, boom },
		nil); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the store's error", err)
	}
	c.StoreFailed()
	if got, want := c.Totals(), (KeeperTotals{Kept: 2, Duplicates: 1, StoreFailures: 2}); got != want {
		t.Fatalf("totals %+v, want %+v", got, want)
	}
}

func TestPause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Pause(ctx, time.Hour) {
		t.Fatal("a pause past ctx's end reported as passed")
	}
	if !Pause(context.Background(), 0) {
		t.Fatal("a pause of zero did not pass")
	}
}

func TestPacer(t *testing.T) {
	// Unbounded: never waits, even on an ended ctx.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range []*Pacer{NewPacer(-1), nil, {}} {
		if err := p.Wait(ended); err != nil {
			t.Fatalf("an unbounded pacer waited: %v", err)
		}
		p.Stop()
	}
	// Bounded (the default rate): an ended ctx ends the wait, unless the
	// tick is already there; a bound that fast ticks within the bound.
	p := NewPacer(0)
	defer p.Stop()
	if p.tick == nil {
		t.Fatal("rate 0 is not the default rate")
	}
	ctx, cancelCtx := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCtx()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("the default rate did not tick: %v", err)
	}
	slow := NewPacer(1e-9) // a tick every ~31 years
	defer slow.Stop()
	if err := slow.Wait(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ctx's error", err)
	}
}

func TestCheckMax(t *testing.T) {
	if err := CheckMax("amqp", 0); err != nil {
		t.Fatal(err)
	}
	if err := CheckMax("amqp", -1); err == nil || err.Error() != "amqp: redrive: negative maximum -1" {
		t.Fatalf("got %v", err)
	}
}

func TestDefaults(t *testing.T) {
	var d time.Duration
	var n, b int
	Defaults(&d, &n, &b, 5, 6)
	if d != 30*time.Second || n != 5 || b != 6 {
		t.Fatalf("defaults %v %d %d", d, n, b)
	}
	d, n, b = time.Second, 1, 2
	Defaults(&d, &n, &b, 5, 6)
	if d != time.Second || n != 1 || b != 2 {
		t.Fatalf("set values changed: %v %d %d", d, n, b)
	}
}

type msg struct {
	Queue string `json:"queue"`
}

func TestValidate(t *testing.T) {
	dest := Destinations{Allowed: []string{"a", "b"}, Field: "payload.queue", Noun: "queue", Verb: "publishes to"}
	q := func(m *msg) string { return m.Queue }
	if err := Validate(json.RawMessage(`{"queue":"a"}`), q, dest); err != nil {
		t.Fatal(err)
	}
	var fe *redrive.FieldError
	err := Validate(json.RawMessage(`{"queue":"c"}`), q, dest)
	if !errors.As(err, &fe) || fe.Field != "payload.queue" {
		t.Fatalf("got %v, want a field error of payload.queue", err)
	}
	if want := `"c" is not a queue this server publishes to (a, b)`; fe.Err.Error() != want {
		t.Fatalf("got %q, want %q", fe.Err, want)
	}
	if err := Validate(json.RawMessage(`{`), q, dest); !errors.As(err, &fe) || fe.Field != "payload" {
		t.Fatalf("got %v, want a field error of payload", err)
	}
	if err := Validate(json.RawMessage(`{"queue":"z"}`), q, Destinations{}); err != nil {
		t.Fatalf("no allowed list: %v", err)
	}
}

// TestPacerExtremeRates gives NewPacer the rates a CLI flag lets through
// (--rate 2e9, --rate Inf, --rate 1e-10): time.NewTicker panics on the
// non-positive interval that float64(time.Second)/rate rounds or
// overflows to. A rate past the ticker's resolution (one send a
// nanosecond) is no bound; a rate so slow that its interval overflows
// waits for ever, until ctx ends. CheckRate refuses NaN.
func TestPacerExtremeRates(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	newPacer := func(rate float64) (p *Pacer, panicked any) {
		defer func() { panicked = recover() }()
		return NewPacer(rate), nil
	}
	for _, rate := range []float64{2e9, 1e300, math.Inf(1)} {
		p, panicked := newPacer(rate)
		if panicked != nil {
			t.Fatalf("NewPacer(%g) panicked: %v", rate, panicked)
		}
		if err := p.Wait(ended); err != nil {
			t.Errorf("NewPacer(%g) waits: %v, want no bound", rate, err)
		}
		p.Stop()
	}
	for _, rate := range []float64{1e-10, math.SmallestNonzeroFloat64} {
		p, panicked := newPacer(rate)
		if panicked != nil {
			t.Fatalf("NewPacer(%g) panicked: %v", rate, panicked)
		}
		if err := p.Wait(ended); !errors.Is(err, context.Canceled) {
			t.Errorf("NewPacer(%g): got %v, want a wait that ctx's end ends", rate, err)
		}
		p.Stop()
	}
	for _, rate := range []float64{0, -1, 1, 2e9, math.Inf(1), math.Inf(-1)} {
		if err := CheckRate("amqp", rate); err != nil {
			t.Errorf("CheckRate(%g): %v", rate, err)
		}
	}
	if err := CheckRate("kafka", math.NaN()); err == nil || err.Error() != "kafka: redrive: rate NaN is not a number" {
		t.Fatalf("CheckRate(NaN): got %v", err)
	}
}
