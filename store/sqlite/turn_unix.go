//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// turns are the store's handles on its database's lock files (see
// turn.go).
type turns struct {
	gate, turn *lockFile
}

// openTurns opens the lock files of the database file SQLite opened (see
// dbFile), or returns nil when it cannot (an in-memory database, a
// read-only directory).
func openTurns(file string) (*turns, error) {
	gate, turn, ok := turnPaths(file)
	if !ok {
		return nil, nil
	}
	g, err := openLockFile(gate)
	if err != nil {
		return nil, err
	}
	t, err := openLockFile(turn)
	if err != nil {
		g.close()
		return nil, err
	}
	return &turns{gate: g, turn: t}, nil
}

func (t *turns) close() {
	if t != nil {
		t.gate.close()
		t.turn.close()
	}
}

// lockFile is an exclusive flock on a file, which a deadline can give up.
type lockFile struct {
	path string
	f    *os.File
	// onRequest, when set (by tests), is called as a blocking flock
	// request starts.
	onRequest func()
}

func openLockFile(path string) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file: %w", err)
	}
	return &lockFile{path: path, f: f}, nil
}

// lock takes the lock, waiting until deadline. A wait given up leaves the
// handle to a goroutine that closes it once the request ends, which lets
// the lock go if it was granted; l opens a new handle for the next lock
// (flock locks belong to the open file, so the abandoned request cannot
// be mistaken for l's).
func (l *lockFile) lock(deadline time.Time) error {
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("sqlite: open lock file: %w", err)
		}
		l.f = f
	}
	err := flock(l.f, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
		return err
	}
	got := make(chan error, 1)
	f := l.f
	if l.onRequest != nil {
		l.onRequest()
	}
	go func() { got <- flock(f, syscall.LOCK_EX) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-got:
		return err
	case <-timer.C:
	}
	l.f = nil
	go func() {
		<-got
		f.Close()
	}()
	return fmt.Errorf("%s: timed out", l.path)
}

func (l *lockFile) unlock() error {
	if l.f == nil {
		return fmt.Errorf("%s: not locked", l.path)
	}
	return flock(l.f, syscall.LOCK_UN)
}

func (l *lockFile) close() {
	if l.f != nil {
		l.f.Close()
	}
}

// flock calls flock(2) on f, again when a signal interrupted it.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
