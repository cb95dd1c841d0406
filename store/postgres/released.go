package postgres

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// A Finish of jobs outside any workflow settles nothing, yet the settle
// statement costs it a statement more (a quarter of a call of 12 plain
// completions on a loaded machine: docs/BENCHMARKS.md). So a queue
// whose last settle found nothing to settle is not settled for
// plainFor; its Finish calls meanwhile are single statements, and a
// workflow job they complete is released by the trigger at the commit,
// notifying in it, as before migration 0050 (correct, only not the
// faster path). Then a call settles again, and the queue is looked at
// anew. A queue never settled is settled.

// plainFor is how long a queue whose Finish settled nothing is not
// settled (nanoseconds).
const plainFor = int64(time.Second)

// settles reports whether a Finish statement of outcomes of queues
// should settle its completions: unless every queue settled nothing
// within plainFor.
func (s *Store) settles(queues []string) bool {
	now := time.Now().UnixNano()
	for _, q := range queues {
		v, ok := s.released.plain.Load(q)
		if !ok || v.(*atomic.Int64).Load() <= now {
			return true
		}
	}
	return false
}

// settled records what a settle of a Finish statement of queues found:
// completions to settle (noted), or none, which spares the queues the
// settle for plainFor.
func (s *Store) settled(queues []string, noted bool) {
	until := int64(0)
	if !noted {
		until = time.Now().UnixNano() + plainFor
	}
	for _, q := range queues {
		v, ok := s.released.plain.Load(q)
		if !ok {
			if noted {
				continue
			}
			v, _ = s.released.plain.LoadOrStore(q, new(atomic.Int64))
		}
		v.(*atomic.Int64).Store(until)
	}
}

// outcomeQueues returns the distinct queues of the outcomes order.
func outcomeQueues(outcomes []store.Outcome, order []int) []string {
	var qs []string
	for _, i := range order {
		if q := outcomes[i].Queue; !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	return qs
}

// releaseInCommit makes Finish leave its workflows' releases to the
// trigger at its commit, which notifies in the commit, as before
// migration 0050. Only benchmarks set it, to compare.
var releaseInCommit bool

// releases are the hooks told of the jobs this store's Finish calls
// released, and the queues waiting to be announced to other processes.
type releases struct {
	settle string // the statement that settles a Finish's completions
	notify string // the statement that announces queues ($1)
	// plain maps a queue to when it is settled again (*atomic.Int64,
	// unix nanoseconds; 0: at once) since a settle found nothing.
	plain sync.Map

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
	s.released.settle = `SELECT q, q IS NOT NULL FROM (SELECT ` + schema + `.jobs_flow_settle() AS q) s`
	s.released.notify = `SELECT count(pg_notify('` + s.channel + `', q)) FROM unnest($1::text[]) AS t(q), set_config('synchronous_commit', 'off', true) AS c`
}

// OnRelease implements store.Releaser: released is called, after the
// commit of each Finish statement that settled its completions and
// released jobs from Blocked (a workflow's dependents, its callbacks),
// once for each queue of those jobs. Other writes that release jobs (a
// Finish of a queue found plain, a death or a cancel in a workflow, a
// job added to one) notify as they did, and the workers hear them by
// Listen.
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
// transaction released, once committed, and whether it had completions
// to settle.
func (s *Store) finishAndSettle(ctx context.Context, sql string, args []any, row func(int32) error) ([]string, bool, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(s.released.settle)
	br := s.pool.SendBatch(ctx, b)
	err := readFinishRows(br.Query, row)
	var (
		queues []string
		noted  bool
	)
	if err == nil {
		err = br.QueryRow().Scan(&queues, &noted)
	}
	// The commit, at the batch's end: its error is the call's.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, err
	}
	return queues, noted, nil
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
