package postgres

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// The release of a workflow's jobs, announced after the commit.
//
// A Finish that completes workflow jobs releases their dependents whose
// last dependency it completed, and fires the callbacks of workflows it
// ended (migrations 0038, 0046). The trigger jobs_flow_batch did that at
// the commit and sent pg_notify for the released jobs' queues, which made
// the commit a notifying one: PostgreSQL commits notifying transactions
// one at a time, each holding a global lock until its commit record is
// flushed (group.go), so the Finish that released a final job waited for
// the enqueues' commits, and they for it.
//
// Now Finish settles its completions itself, in its transaction: its
// statement and jobs_flow_settle (migration 0050), which applies the
// completions the statement noted and returns the released jobs'
// queues, go in one round trip, one implicit transaction, whose commit
// notifies nothing. Once it committed, the store tells the workers of
// this process at once (store.Releaser), and the others by one NOTIFY
// per queue, sent by a transaction of its own that writes nothing else:
// its commit does not wait for a flush (synchronous_commit off: it has
// nothing durable to flush; a notification is lost in a crash anyway,
// and listeners check every queue when they reconnect), so it holds the
// notifying commits' lock only briefly. Releases found while a NOTIFY is
// being sent are sent together by the next one.

// releaseInCommit makes Finish leave its workflows' releases to the
// trigger at its commit, which notifies in the commit, as before
// migration 0050. Only benchmarks set it, to compare.
var releaseInCommit bool

// releases are the hooks told of the jobs this store's Finish calls
// released, and the queues waiting to be announced to other processes.
type releases struct {
	settle string // the statement that settles a Finish's completions
	notify string // the statement that announces queues ($1)

	mu      sync.Mutex
	hooks   map[*func(string)]struct{}
	pending map[string]struct{} // queues to announce
	sending bool                // a goroutine is announcing
	stopped bool                // the store closed: no more announcing
	sends   sync.WaitGroup      // the announcing goroutine
	// sent, when set (by tests, before the calls), is called after each
	// NOTIFY with its queues and its error.
	sent func(queues []string, err error)
}

// initReleases renders the statements of releases for the quoted schema.
func (s *Store) initReleases(schema string) {
	s.released.settle = `SELECT ` + schema + `.jobs_flow_settle()`
	s.released.notify = `SELECT count(pg_notify('` + s.channel + `', q)) FROM unnest($1::text[]) AS t(q), set_config('synchronous_commit', 'off', true) AS c`
}

// OnRelease implements store.Releaser: released is called, after the
// commit of each Finish statement that released jobs from Blocked (a
// workflow's dependents, its callbacks), once for each queue of those
// jobs. Other writes that release jobs (a death or a cancel in a
// workflow, a job added to one) notify as they did, and the workers hear
// them by Listen.
func (s *Store) OnRelease(released func(queue string)) (remove func()) {
	r := &s.released
	key := &released
	r.mu.Lock()
	if r.hooks == nil {
		r.hooks = map[*func(string)]struct{}{}
	}
	r.hooks[key] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.hooks, key)
		r.mu.Unlock()
	}
}

// announce tells, once committed, of the queues a write released jobs
// in: the hooks at once, other processes by a NOTIFY on a goroutine.
func (s *Store) announce(queues []string) {
	if len(queues) == 0 {
		return
	}
	r := &s.released
	r.mu.Lock()
	hooks := make([]func(string), 0, len(r.hooks))
	for h := range r.hooks {
		hooks = append(hooks, *h)
	}
	if r.pending == nil {
		r.pending = map[string]struct{}{}
	}
	for _, q := range queues {
		r.pending[q] = struct{}{}
	}
	start := !r.sending && !r.stopped
	if start {
		r.sending = true
		r.sends.Add(1)
	}
	r.mu.Unlock()
	for _, h := range hooks {
		for _, q := range queues {
			h(q)
		}
	}
	if start {
		go s.sendAnnouncements()
	}
}

// sendAnnouncements sends the pending queues' NOTIFY, and again while
// more arrived during the last one, until none is left or the store is
// closed.
func (s *Store) sendAnnouncements() {
	r := &s.released
	defer r.sends.Done()
	for {
		r.mu.Lock()
		if len(r.pending) == 0 || r.stopped {
			r.pending = nil
			r.sending = false
			r.mu.Unlock()
			return
		}
		queues := slices.Sorted(maps.Keys(r.pending))
		r.pending = nil
		sent := r.sent
		r.mu.Unlock()
		_, err := s.pool.Exec(s.done, r.notify, queues)
		if err != nil && s.done.Err() == nil {
			// The other processes find the jobs at their next poll.
			s.log.Warn("postgres: announcing released jobs failed", "queues", queues, "error", err)
		}
		if sent != nil {
			sent(queues, err)
		}
	}
}

// stopAnnouncing stops the announcing to other processes (Close): no
// NOTIFY starts after it, and it waits for the one being sent.
func (s *Store) stopAnnouncing() {
	s.released.mu.Lock()
	s.released.stopped = true
	s.released.mu.Unlock()
	s.released.sends.Wait()
}

// finishAndSettle sends a Finish statement and the settle of its workflows'
// completions in one round trip, one transaction, and hands each row of
// the statement to row; it returns the queues of the jobs the
// transaction released, once committed.
func (s *Store) finishAndSettle(ctx context.Context, sql string, args []any, row func(int32) error) ([]string, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(s.released.settle)
	br := s.pool.SendBatch(ctx, b)
	err := readFinishRows(br.Query, row)
	var queues []string
	if err == nil {
		err = br.QueryRow().Scan(&queues)
	}
	// The commit, at the batch's end: its error is the call's.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return queues, nil
}

// readFinishRows reads the rows of a Finish statement's query.
func readFinishRows(query func() (pgx.Rows, error), row func(int32) error) error {
	rows, err := query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n int32
		if err := rows.Scan(&n); err != nil {
			return err
		}
		if err := row(n); err != nil {
			return err
		}
	}
	return rows.Err()
}

var _ store.Releaser = (*Store)(nil)
