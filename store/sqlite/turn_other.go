//go:build !unix

package sqlite

import "time"

// turns is empty where flock is not available: the stores of a file do
// not take turns, SQLite's busy handler alone waits for the write lock.
type turns struct {
	gate, turn *lockFile
}

func openTurns(string) (*turns, error) { return nil, nil }

func (t *turns) close() {}

type lockFile struct{}

func (*lockFile) lock(time.Time) error { return nil }

func (*lockFile) unlock() error { return nil }
