package postgres

// OnGroupWrite calls f with every enqueue write of s: its jobs, the
// group writers running and whether the workers were busy.
func OnGroupWrite(s *Store, f func(jobs, writers int, busy bool)) {
	s.group.mu.Lock()
	s.group.onWrite = f
	s.group.mu.Unlock()
}

// BusyGroupJobs is the bound of a merged enqueue write while the
// workers are busy.
const BusyGroupJobs = busyGroupJobs

// HotStatements returns the SQL of the statements a busy worker runs for
// each batch of jobs, by name.
func HotStatements(s *Store) map[string]string {
	return map[string]string{"fetch": s.sql.fetch, "finish": s.sql.finish, "complete": s.sql.complete,
		"heartbeat": s.sql.heartbeat, "progress": s.sql.progress, "expired": s.sql.expired}
}
