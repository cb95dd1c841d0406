package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync"
	"sync/atomic"

	"modernc.org/sqlite"

	"github.com/redrivehq/redrive/store"
)

// A blocked job made due by a trigger (a workflow's dependent released by
// its last dependency's completion, a callback fired) is announced to the
// engine in this process, as an enqueue is, so that a worker fetches it
// at once rather than at its next poll. The writer connection holds a
// TEMP trigger (it lives with the connection, not in the file: other
// connections and processes do not have it) that calls
// redrive_released(store, queue) for each such move; the store keeps the
// queues until the transaction commits, then calls the hooks
// (store.Releaser). A job outside a workflow is never blocked: the
// trigger's WHEN (OLD.state = 'blocked') is all it pays.

// releasing maps a store's number to the store, for redrive_released.
var (
	releasing sync.Map // int64 -> *Store
	releaseN  atomic.Int64
)

func init() {
	sqlite.MustRegisterScalarFunction("redrive_released", 2,
		func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			id, _ := args[0].(int64)
			q, _ := args[1].(string)
			if b, ok := args[1].([]byte); ok {
				q = string(b)
			}
			if v, ok := releasing.Load(id); ok {
				v.(*Store).released.add(q)
			}
			return nil, nil
		})
}

// releases are the queues a transaction released jobs in, and the
// hooks to tell after its commit.
type releases struct {
	mu     sync.Mutex
	queues map[string]struct{}
	hooks  map[*func(string)]struct{}
}

func (r *releases) add(queue string) {
	r.mu.Lock()
	if r.queues == nil {
		r.queues = map[string]struct{}{}
	}
	r.queues[queue] = struct{}{}
	r.mu.Unlock()
}

// end closes a transaction: committed, the hooks hear of its queues;
// rolled back, they are forgotten.
func (r *releases) end(committed bool) {
	r.mu.Lock()
	qs := r.queues
	r.queues = nil
	var hooks []func(string)
	if committed && len(qs) > 0 {
		for h := range r.hooks {
			hooks = append(hooks, *h)
		}
	}
	r.mu.Unlock()
	for _, h := range hooks {
		for q := range qs {
			h(q)
		}
	}
}

// OnRelease implements store.Releaser.
func (s *Store) OnRelease(released func(queue string)) (remove func()) {
	key := &released
	s.released.mu.Lock()
	if s.released.hooks == nil {
		s.released.hooks = map[*func(string)]struct{}{}
	}
	s.released.hooks[key] = struct{}{}
	s.released.mu.Unlock()
	return func() {
		s.released.mu.Lock()
		delete(s.released.hooks, key)
		s.released.mu.Unlock()
	}
}

// watchReleases numbers the store and creates the writer connection's
// TEMP trigger that reports released jobs to it.
func (s *Store) watchReleases(ctx context.Context) error {
	s.releaseID = releaseN.Add(1)
	releasing.Store(s.releaseID, s)
	_, err := s.wconn.ExecContext(ctx, fmt.Sprintf(`CREATE TEMP TRIGGER redrive_released AFTER UPDATE OF state ON main.jobs
WHEN OLD.state = 'blocked' AND NEW.state IN ('pending', 'scheduled')
BEGIN
    SELECT redrive_released(%d, NEW.queue);
END`, s.releaseID))
	if err != nil {
		releasing.Delete(s.releaseID)
		return fmt.Errorf("sqlite: open: %w", err)
	}
	return nil
}

var _ store.Releaser = (*Store)(nil)
