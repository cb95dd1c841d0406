package postgres

import (
	"context"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"
)

// SetListenIdle sets how long Listen waits before pinging an idle
// connection, and returns a function restoring the previous value.
func SetListenIdle(d time.Duration) (restore func()) {
	old := listenIdle.Swap(int64(d))
	return func() { listenIdle.Store(old) }
}

// HoldEnqueues keeps the Enqueue calls of s waiting, as if every writer
// were busy, until release: the calls then waiting are written together,
// merged into one batch. waiting tells how many calls wait. It first
// waits for the writers of earlier calls to end.
func HoldEnqueues(t testing.TB, s *Store) (waiting func() int, release func()) {
	t.Helper()
	g := &s.group
	// A writer of earlier calls may still be winding down.
	testwait.Until(t, "the writers of earlier Enqueue calls to end", 20*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		idle := g.writers == 0
		if idle {
			g.writers += maxGroupWrites
		}
		return idle
	})
	waiting = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := 0
		for _, c := range g.queue {
			if !c.abandoned {
				n++
			}
		}
		return n
	}
	release = func() {
		g.mu.Lock()
		g.writers -= maxGroupWrites
		start := len(g.queue) > 0 && g.writers < maxGroupWrites
		if start {
			g.writers++
		}
		g.mu.Unlock()
		if start {
			go g.write(s)
		}
	}
	return waiting, release
}

// SetRawDecode turns the decoding of job rows from their bytes on or off
// (pgx's scan), and returns a function restoring the previous setting.
func SetRawDecode(on bool) (restore func()) {
	old := rawDecode
	rawDecode = on
	return func() { rawDecode = old }
}

// RawLayouts reports, for the statements whose rows collect reads in
// bulk (fetch, and a list's), whether their rows are decoded from their
// bytes.
func RawLayouts(ctx context.Context, s *Store) (fetch, list bool, err error) {
	rows, err := s.pool.Query(ctx, s.sql.fetch, "q", time.Now(), 0, time.Now(), time.Now(), "w", int16(0))
	if err != nil {
		return false, false, err
	}
	fetch, _ = rawLayout(rows.FieldDescriptions(), false)
	rows.Close()
	rows, err = s.pool.Query(ctx, `SELECT `+cols("", true)+` FROM `+s.sql.jobs+` LIMIT 0`)
	if err != nil {
		return false, false, err
	}
	list, _ = rawLayout(rows.FieldDescriptions(), true)
	rows.Close()
	return fetch, list, rows.Err()
}

// AddMigration makes Migrate apply one more migration, named name (it
// must sort after the embedded ones), and returns a function removing it.
func AddMigration(name, body string) (restore func()) {
	old := migrationFS
	m := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(migrations, "migrations/"+e.Name())
		if err != nil {
			panic(err)
		}
		m["migrations/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	m["migrations/"+name] = &fstest.MapFile{Data: []byte(body)}
	migrationFS = m
	return func() { migrationFS = old }
}

// OnListenPing has f called after each ping of an idle listening
// connection of s. Set before Listen.
func OnListenPing(s *Store, f func()) { s.listenPinged = f }

// OnElectRound has f called at the end of each round of an election of
// s, with the role and whether s then leads. Set before Elect.
func OnElectRound(s *Store, f func(role string, leading bool)) { s.electRound = f }

// SetElectConnectTimeout sets how long an election's connection attempt
// may take, and returns a function restoring the previous value.
func SetElectConnectTimeout(d time.Duration) (restore func()) {
	old := electConnectTimeout.Swap(int64(d))
	return func() { electConnectTimeout.Store(old) }
}

// LimitLockKey is the advisory lock key of s's fetches of limited jobs.
func LimitLockKey(s *Store) int64 { return s.limitLockKey() }

// WatchFinish calls watch before each Finish statement of s with whether
// it is the statement of plain completions and its number of outcomes.
func WatchFinish(s *Store, watch func(complete bool, outcomes int)) {
	s.finishStatement = watch
}

// SetFinishBatch sets the most outcomes one Finish statement takes, and
// returns a function restoring the previous value.
func SetFinishBatch(n int) (restore func()) {
	old := finishBatch
	finishBatch = n
	return func() { finishBatch = old }
}

// SetFinishWhole makes Finish write each call as it did before splitting
// plain completions from the other outcomes (whole, in one statement),
// and returns a function restoring the previous value.
func SetFinishWhole(whole bool) (restore func()) {
	old := finishWhole
	finishWhole = whole
	return func() { finishWhole = old }
}

// SetReleaseInCommit makes Finish leave its workflows' releases to the
// trigger at its commit, notifying in the commit (as before migration
// 0050), and returns a function restoring the previous value.
func SetReleaseInCommit(inCommit bool) (restore func()) {
	old := releaseInCommit
	releaseInCommit = inCommit
	return func() { releaseInCommit = old }
}

// SetReleaseSent sets the hook called after each NOTIFY announcing
// released jobs, with its queues and its error.
func (s *Store) SetReleaseSent(sent func(queues []string, err error)) {
	s.released.mu.Lock()
	s.released.sent = sent
	s.released.mu.Unlock()
}

// WaitAnnounced waits for the NOTIFY being sent to announce released
// jobs, if any (no Finish may run meanwhile).
func (s *Store) WaitAnnounced() { s.released.sends.Wait() }

// MigrateThrough makes Migrate apply only the embedded migrations of
// version at most version, and returns a function restoring them all.
// It keeps 0037 (jobs.trace_packed) whatever the version: every read and
// enqueue of the store uses that column, and adding it changes nothing
// an earlier migration does, so it may come first.
func MigrateThrough(version int) (restore func()) {
	old := migrationFS
	m := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		var v int
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err != nil {
			panic(err)
		}
		if v > version && v != 37 {
			continue
		}
		b, err := fs.ReadFile(migrations, "migrations/"+e.Name())
		if err != nil {
			panic(err)
		}
		m["migrations/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	migrationFS = m
	// Below 0032 there is no job_deps for a read of a dead job to probe.
	// Below 0050 there is no jobs_flow_settle: the trigger releases at
	// the commit.
	oldDeps, oldWaits, oldClosed, oldInCommit := readDeps, writeWaits, readClosed, releaseInCommit
	readDeps, writeWaits, readClosed, releaseInCommit = version >= 32, version >= 34, version >= 36, version < 50
	return func() {
		migrationFS, readDeps, writeWaits, readClosed, releaseInCommit = old, oldDeps, oldWaits, oldClosed, oldInCommit
	}
}

// SetSlotPruneEvery sets how many takes of limit slots pass between two
// prunings of every ended slot.
func SetSlotPruneEvery(n int64) (restore func()) {
	old := slotPruneEvery
	slotPruneEvery = n
	return func() { slotPruneEvery = old }
}

// SetAnalyzeEvery sets how many rows a store enqueues between two checks
// of the jobs table's statistics.
func SetAnalyzeEvery(n int64) (restore func()) {
	old := analyzeEvery
	analyzeEvery = n
	return func() { analyzeEvery = old }
}

// AnalyzeIfStale runs one check of the jobs table's statistics of s, as
// the store does every analyzeEvery rows enqueued, and says whether it
// ran an ANALYZE.
func AnalyzeIfStale(ctx context.Context, s *Store) (bool, error) { return s.analyzeIfStale(ctx) }

// SetErrorPrefixFew sets how many dead jobs with one error prefix a
// listing of s sorts from jobs_dead_error; with as many or more it walks
// the newest dead jobs.
func SetErrorPrefixFew(s *Store, n int) { s.prefixFew = n }

// SetDeadChunk sets how many jobs one AddDead statement inserts, and
// returns a function restoring the previous value. Only for tests that
// run no other test meanwhile.
func SetDeadChunk(n int) (restore func()) {
	old := deadChunk.Swap(int64(n))
	return func() { deadChunk.Store(old) }
}
