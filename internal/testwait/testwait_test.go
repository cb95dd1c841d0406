package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records a failure instead of failing the test.
type fakeTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// run runs body with a fake TB on its own goroutine, as a test runs.
func run(t *testing.T, body func(tb testing.TB)) string {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); body(f) }()
	<-done
	return f.message()
}

func TestUntilReturnsOnceTrue(t *testing.T) {
	n := 0
	Until(t, "three checks", time.Minute, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("checked %d times, want 3", n)
	}
}

func TestUntilFailsSayingWhat(t *testing.T) {
	msg := run(t, func(tb testing.TB) { Until(tb, "the moon", time.Millisecond, func() bool { return false }) })
	if !strings.Contains(msg, "waiting for the moon") {
		t.Fatalf("message %q does not say what was waited for", msg)
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, "seven", time.Minute, ch); got != 7 {
		t.Fatalf("got %d", got)
	}
	msg := run(t, func(tb testing.TB) { Recv(tb, "a value", time.Millisecond, make(chan int)) })
	if !strings.Contains(msg, "waiting for a value") {
		t.Fatalf("message %q", msg)
	}
	close(ch)
	msg = run(t, func(tb testing.TB) { Recv(tb, "a value", time.Minute, ch) })
	if !strings.Contains(msg, "closed") {
		t.Fatalf("message %q", msg)
	}
}

func TestWatchReportsLastState(t *testing.T) {
	n := 0
	msg := run(t, func(tb testing.TB) {
		Watch(tb, "the count", time.Millisecond, func() (bool, string) { n++; return false, fmt.Sprintf("count %d", n) })
	})
	if !strings.Contains(msg, "waiting for the count; last seen: count ") {
		t.Fatalf("message %q does not give the last state", msg)
	}
}

func TestProgressWaitsWhileMoving(t *testing.T) {
	n := int64(0)
	msg := run(t, func(tb testing.TB) {
		// Rises by one a check: never stalls, done at 50, however long
		// 50 checks take.
		Progress(tb, "fifty", 20*Interval, func() (int64, bool) { n++; return n, n >= 50 })
	})
	if msg != "" || n != 50 {
		t.Fatalf("failed %q after %d checks, want done at 50", msg, n)
	}
}

func TestProgressFailsOnStall(t *testing.T) {
	msg := run(t, func(tb testing.TB) {
		Progress(tb, "the queue to drain", 4*Interval, func() (int64, bool) { return 7, false })
	})
	if !strings.Contains(msg, "the queue to drain") || !strings.Contains(msg, "no progress") || !strings.Contains(msg, "stuck at 7") {
		t.Fatalf("message %q", msg)
	}
}
