package redrive

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWakeWhileUnregistering runs wake concurrently with workers
// registering and unregistering their wakers: with -race, a waker slice
// changed in place under a running wake is reported.
func TestWakeWhileUnregistering(t *testing.T) {
	c := &Client{}
	c.hooksKey = c
	var woken atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				c.wake("q", time.Time{})
			}
		}
	}()
	for range 2000 {
		unregister := c.register("q", func(time.Time) { woken.Add(1) })
		unregister()
	}
	close(stop)
	wg.Wait()
	// Every waker was unregistered: none is called any more.
	before := woken.Load()
	c.wake("q", time.Time{})
	if woken.Load() != before {
		t.Error("an unregistered waker was called")
	}
}
