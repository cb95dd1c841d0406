package redrive

import (
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// hooks are the wake-up, pause and cancel hooks of the workers running in
// this process on one store. Every Client of that store in the process
// calls them, so that a worker hears at once of an enqueue, a pause or a
// cancellation made through any of them, not only through its own.
type hooks struct {
	refs int // registrations, under hubsMu

	mu        sync.RWMutex
	wakers    map[string][]*func(time.Time) // queue -> wake-ups
	pausers   map[string][]*func(bool)      // queue -> pause hooks
	anyPause  map[*func(string, bool)]struct{}
	cancelers map[*func()]struct{}

	// unrelease removes the hook by which a store.Releaser (SQLite,
	// PostgreSQL) wakes these workers for the jobs its writes release; nil: none.
	unrelease func()
}

// hubs holds the hooks of each store that has some registered, keyed by
// the store (or, for a store whose type cannot be a map key, by the
// Client, whose hooks then serve it alone). An entry is removed with its
// last registration, so a store closed is not kept.
var (
	hubs   sync.Map // key -> *hooks
	hubsMu sync.Mutex
)

// hooksKey returns the key of s's hooks for the client c.
func hooksKey(c *Client, s store.Store) any {
	// The value, not its type: a comparable type (a struct with an
	// interface field) may hold a value that is not, whose hash panics.
	if s != nil && reflect.ValueOf(s).Comparable() {
		return s
	}
	return c
}

// hooks returns the hooks registered on the client's store, or nil.
func (c *Client) hooks() *hooks {
	if h, ok := hubs.Load(c.hooksKey); ok {
		return h.(*hooks)
	}
	return nil
}

// acquireHooks returns the hooks of the client's store, created if need
// be, counting one more registration; releaseHooks undoes it.
func (c *Client) acquireHooks() *hooks {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	var h *hooks
	if v, ok := hubs.Load(c.hooksKey); ok {
		h = v.(*hooks)
	} else {
		h = &hooks{wakers: map[string][]*func(time.Time){}, pausers: map[string][]*func(bool){},
			anyPause: map[*func(string, bool)]struct{}{}, cancelers: map[*func()]struct{}{}}
		if r, ok := c.store.(store.Releaser); ok {
			// A workflow's dependent released by a completion (or a
			// callback fired) wakes the workers as an enqueue does.
			h.unrelease = r.OnRelease(func(queue string) { h.wake(queue, time.Now()) })
		}
		hubs.Store(c.hooksKey, h)
	}
	h.refs++
	return h
}

func (c *Client) releaseHooks(h *hooks) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h.refs--
	if h.refs == 0 {
		hubs.CompareAndDelete(c.hooksKey, h)
		if h.unrelease != nil {
			h.unrelease()
		}
	}
}

// register adds an in-process wake-up for queue; it returns the function
// that removes it.
func (c *Client) register(queue string, wake func(time.Time)) func() {
	h := c.acquireHooks()
	key := &wake
	h.mu.Lock()
	h.wakers[queue] = append(slices.Clip(h.wakers[queue]), key)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		// Copy on write: wake ranges over the slice it read without the
		// lock, so the slice it may hold must not change. The hook is
		// removed, not left as a no-op, so that workers that come and go
		// beside one that stays do not grow the list.
		if ws := removeHook(h.wakers, queue, key); ws != nil {
			h.wakers[queue] = ws
		}
		h.mu.Unlock()
		c.releaseHooks(h)
	}
}

// removeHook returns a copy of m[queue] without key, and deletes queue
// from m when none is left (it then returns nil).
func removeHook[F any](m map[string][]*F, queue string, key *F) []*F {
	hs := slices.DeleteFunc(slices.Clone(m[queue]), func(f *F) bool { return f == key })
	if len(hs) == 0 {
		delete(m, queue)
		return nil
	}
	return hs
}

// wake tells the in-process workers of queue, on any Client of the
// store, that work due at at was added.
func (c *Client) wake(queue string, at time.Time) {
	if h := c.hooks(); h != nil {
		h.wake(queue, at)
	}
}

// wake calls the wake-ups of queue's workers.
func (h *hooks) wake(queue string, at time.Time) {
	h.mu.RLock()
	ws := h.wakers[queue]
	h.mu.RUnlock()
	for _, w := range ws {
		(*w)(at)
	}
}

// wokenQueues returns the queues an in-process worker of the store
// serves.
func (c *Client) wokenQueues() []string {
	h := c.hooks()
	if h == nil {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	qs := make([]string, 0, len(h.wakers))
	for q := range h.wakers {
		qs = append(qs, q)
	}
	return qs
}

// registerPause adds an in-process worker's hook for pauses and resumes of
// queue; it returns the function that removes it.
func (c *Client) registerPause(queue string, hook func(paused bool)) func() {
	h := c.acquireHooks()
	key := &hook
	h.mu.Lock()
	h.pausers[queue] = append(slices.Clip(h.pausers[queue]), key)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if hs := removeHook(h.pausers, queue, key); hs != nil {
			h.pausers[queue] = hs
		}
		h.mu.Unlock()
		c.releaseHooks(h)
	}
}

// registerAnyPause adds a hook for the pauses and resumes of every
// queue; it returns the function that removes it.
func (c *Client) registerAnyPause(hook func(queue string, paused bool)) func() {
	h := c.acquireHooks()
	key := &hook
	h.mu.Lock()
	h.anyPause[key] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.anyPause, key)
		h.mu.Unlock()
		c.releaseHooks(h)
	}
}

// notifyPaused tells the in-process workers of queue, on any Client of
// the store, that it was paused or resumed. It returns once they have
// stopped fetching from it.
func (c *Client) notifyPaused(queue string, paused bool) {
	h := c.hooks()
	if h == nil {
		return
	}
	h.mu.RLock()
	hs := slices.Clone(h.pausers[queue])
	all := make([]func(string, bool), 0, len(h.anyPause))
	for f := range h.anyPause {
		all = append(all, *f)
	}
	h.mu.RUnlock()
	for _, f := range hs {
		(*f)(paused)
	}
	for _, f := range all {
		f(queue, paused)
	}
}

// registerCancel adds an in-process hook called when a client of the
// store requests the cancellation of a running job; it returns the
// function that removes it.
func (c *Client) registerCancel(hook func()) func() {
	h := c.acquireHooks()
	key := &hook
	h.mu.Lock()
	h.cancelers[key] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.cancelers, key)
		h.mu.Unlock()
		c.releaseHooks(h)
	}
}

// wakeCancel calls the cancel hooks of the in-process workers of the
// store.
func (c *Client) wakeCancel() {
	h := c.hooks()
	if h == nil {
		return
	}
	h.mu.RLock()
	fs := make([]func(), 0, len(h.cancelers))
	for f := range h.cancelers {
		fs = append(fs, *f)
	}
	h.mu.RUnlock()
	for _, f := range fs {
		f()
	}
}
