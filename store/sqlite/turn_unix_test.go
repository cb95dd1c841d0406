//go:build unix

package sqlite

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
)

// TestLockWaitsGivenUpShareOneRequest: a lock wait that times out leaves
// its flock request pending (a blocked flock cannot be interrupted), and
// the next wait takes that request over instead of starting another. One
// request per lock file however many waits time out: a process stuck
// holding the turn used to cost every other process one blocked goroutine
// and OS thread per write per busy timeout, until it let go. Once the
// holder lets go, the pending request's lock goes to the next wait, or,
// when none waits, is let go at once so that it blocks nobody.
func TestLockWaitsGivenUpShareOneRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db-turn")
	holder, err := openLockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.close()
	if err := holder.lock(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := openLockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var started int
	l.onRequest = func() { started++ }
	for i := range 5 {
		if err := l.lock(time.Now().Add(time.Millisecond)); err == nil {
			t.Fatalf("wait %d: took a lock the holder has", i)
		}
	}
	if started != 1 {
		t.Fatalf("5 waits given up started %d blocking requests, want 1", started)
	}
	// The holder lets go while a wait is on: that wait gets the lock.
	got := make(chan error, 1)
	go func() { got <- l.lock(time.Now().Add(time.Minute)) }()
	if err := holder.unlock(); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, "the waiting lock", time.Minute, got); err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	if started != 1 {
		t.Fatalf("a wait after the timeouts started request %d, want it to take over the first", started)
	}
	// And l lets it go for good.
	if err := l.unlock(); err != nil {
		t.Fatal(err)
	}
	if err := holder.lock(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("the lock l let go: %v", err)
	}

	// A request whose lock comes while nobody waits lets it go at once.
	if err := l.lock(time.Now().Add(time.Millisecond)); err == nil {
		t.Fatal("took a lock the holder has")
	}
	if err := holder.unlock(); err != nil {
		t.Fatal(err)
	}
	other, err := openLockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.close()
	testwait.Until(t, "the abandoned request's lock is let go", time.Minute, func() bool {
		err := flock(other.f, syscall.LOCK_EX|syscall.LOCK_NB)
		return err == nil || !errors.Is(err, syscall.EWOULDBLOCK)
	})
}
