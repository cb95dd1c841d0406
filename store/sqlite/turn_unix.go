//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"sync"
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
// Only one goroutine at a time calls lock, unlock and close (the store's
// writer).
type lockFile struct {
	path string
	f    *os.File // the handle that holds, or will ask for, the lock
	// pending is the blocking request a wait gave up on, still waiting
	// in flock (nil: none): the next wait takes it over rather than start
	// another, so a holder that never lets go costs one blocked request
	// (a goroutine and its OS thread), not one per wait.
	pending *lockRequest
	// onRequest, when set (by tests), is called as a blocking flock
	// request starts; onEnd, when set before the request starts, as it
	// ends (from the request's goroutine).
	onRequest, onEnd func()
}

// lockRequest is a blocking flock on its own handle, f. When it ends, it
// hands the result to the wait registered in waiter, or, when none is,
// closes f, which lets a granted lock go at once.
type lockRequest struct {
	f      *os.File
	mu     sync.Mutex
	waiter chan error // buffered; nil while no wait is on
	ended  bool       // ended with no wait on: f is closed
	onEnd  func()     // see lockFile.onEnd
}

func (r *lockRequest) run() {
	err := flock(r.f, syscall.LOCK_EX)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.onEnd != nil {
		defer r.onEnd()
	}
	if r.waiter != nil {
		r.waiter <- err
		r.waiter = nil
		return
	}
	r.ended = true
	r.f.Close()
}

func openLockFile(path string) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file: %w", err)
	}
	return &lockFile{path: path, f: f}, nil
}

// lock takes the lock, waiting until deadline. A wait given up leaves
// its request pending (a blocked flock cannot be interrupted), with its
// own handle: the next lock waits on that request again; if the lock
// comes while no wait is on, the request lets it go (flock locks belong
// to the open file, so an abandoned request's lock is never mistaken for
// l's).
func (l *lockFile) lock(deadline time.Time) error {
	got := make(chan error, 1)
	var r *lockRequest
	if p := l.pending; p != nil {
		// Checked and registered at once: a request that ends after the
		// check hands its result to this wait.
		p.mu.Lock()
		if p.ended {
			l.pending = nil
		} else {
			r = p
			r.waiter = got
		}
		p.mu.Unlock()
	}
	if r == nil {
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
		r = &lockRequest{f: l.f, waiter: got, onEnd: l.onEnd}
		l.f, l.pending = nil, r
		if l.onRequest != nil {
			l.onRequest()
		}
		go r.run()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-got:
		return l.took(r, err)
	case <-timer.C:
	}
	r.mu.Lock()
	if r.waiter == got {
		r.waiter = nil
		r.mu.Unlock()
		return fmt.Errorf("%s: timed out", l.path)
	}
	r.mu.Unlock()
	return l.took(r, <-got) // handed over as the wait gave up
}

// took makes the ended request r's handle l's: it holds the lock unless
// the request failed.
func (l *lockFile) took(r *lockRequest, err error) error {
	l.pending = nil
	if err != nil {
		r.f.Close()
		return err
	}
	l.f = r.f
	return nil
}

func (l *lockFile) unlock() error {
	if l.f == nil {
		return fmt.Errorf("%s: not locked", l.path)
	}
	return flock(l.f, syscall.LOCK_UN)
}

// close closes l's handle. A pending request stays blocked until the
// holder lets go, then lets the lock go and closes its own handle.
func (l *lockFile) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	l.pending = nil
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
