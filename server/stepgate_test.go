package server

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// stepGate is a store whose operation steps after the first free ones
// wait until the test opens the gate: an operation runner is held
// midway, so that a test can pause it there, whatever the machine's
// speed (on the wall clock, a loaded machine let a rate-limited
// operation finish before the test's pause came).
type stepGate struct {
	*sqlite.Store
	free   int
	mu     sync.Mutex
	steps  int
	held   chan struct{} // receives when a step waits at the gate
	open   chan struct{} // closed by the test to let the steps through
	opened sync.Once
	after  chan error // the result of the first step let through the gate
}

// newGatedEnv is newEnv on a stepGate that lets free steps through.
func newGatedEnv(t *testing.T, opts Options, free int) (*env, *stepGate) {
	t.Helper()
	st := openStore(t)
	g := &stepGate{Store: st, free: free, held: make(chan struct{}, 1), open: make(chan struct{}), after: make(chan error, 1)}
	t.Cleanup(g.release) // before the store closes: no runner stays held
	c := redrive.NewClient(g, redrive.ClientOptions{Logger: quiet})
	opts.Client = c
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	api := New(opts)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })
	return &env{t: t, srv: srv, api: api, client: c, st: st, token: opts.Token}, g
}

// release opens the gate.
func (g *stepGate) release() { g.opened.Do(func() { close(g.open) }) }

// StepOperation lets the first free steps through, then holds each until
// the gate opens.
func (g *stepGate) StepOperation(ctx context.Context, s store.OperationStep) (store.StepResult, error) {
	g.mu.Lock()
	g.steps++
	gated := g.steps > g.free
	first := g.steps == g.free+1
	g.mu.Unlock()
	if !gated {
		return g.Store.StepOperation(ctx, s)
	}
	select {
	case g.held <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return store.StepResult{}, ctx.Err()
	}
	res, err := g.Store.StepOperation(ctx, s)
	if first {
		g.after <- err
	}
	return res, err
}
