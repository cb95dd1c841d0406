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
