package breaker

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// Registry holds breakers by name, typically one per dependency. It is safe
// for concurrent use. The zero Registry is ready to use and creates breakers
// with the default configuration.
type Registry struct {
	defaults Config
	byName   sync.Map                   // string -> *Breaker
	mu       sync.Mutex                 // serializes creation and replacement
	shared   atomic.Pointer[sharedHook] // the Shared layer of new breakers (shared.go)
}

// NewRegistry returns a registry whose breakers are created with defaults.
// Invalid fields of defaults are replaced by the package defaults, as in New;
// call defaults.Validate first to reject them instead. defaults.OnStateChange,
// if set, is shared by every breaker created with the defaults and tells them
// apart by name.
func NewRegistry(defaults Config) *Registry {
	return &Registry{defaults: defaults}
}

// Get returns the breaker named name, creating it with the registry's
// defaults on first use. Looking up an existing name takes no lock.
func (r *Registry) Get(name string) *Breaker {
	if b, ok := r.byName.Load(name); ok {
		return b.(*Breaker)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.byName.Load(name); ok {
		return b.(*Breaker)
	}
	b := New(name, r.defaults)
	r.attach(b)
	r.byName.Store(name, b)
	return b
}

// Lookup returns the breaker named name without creating it. Use it where
// names come from outside, such as an API request, so that unknown names do
// not create breakers.
func (r *Registry) Lookup(name string) (*Breaker, bool) {
	b, ok := r.byName.Load(name)
	if !ok {
		return nil, false
	}
	return b.(*Breaker), true
}

// Configure creates the breaker named name with cfg, replacing any breaker
// already registered under that name, and returns it. The replaced breaker's
// state is dropped; code still holding it keeps a working but unregistered
// breaker, so configure breakers at start-up, before handing them out.
//
// The numeric fields of cfg are used as given: a zero field takes the package
// default, not the registry's, and invalid fields take the package defaults
// as in New. The function fields IsFailure, OnStateChange and Now, when nil,
// are inherited from the registry's defaults, so a state-change hook or a
// clock set on the registry covers every breaker in it.
func (r *Registry) Configure(name string, cfg Config) *Breaker {
	if cfg.IsFailure == nil {
		cfg.IsFailure = r.defaults.IsFailure
	}
	if cfg.OnStateChange == nil {
		cfg.OnStateChange = r.defaults.OnStateChange
	}
	if cfg.Now == nil {
		cfg.Now = r.defaults.Now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := New(name, cfg)
	r.attach(b)
	r.byName.Store(name, b)
	return b
}

// Statuses returns the status of every registered breaker, sorted by name.
func (r *Registry) Statuses() []Status {
	var bs []*Breaker
	r.byName.Range(func(_, v any) bool {
		bs = append(bs, v.(*Breaker))
		return true
	})
	slices.SortFunc(bs, func(a, b *Breaker) int { return cmp.Compare(a.name, b.name) })
	out := make([]Status, len(bs))
	for i, b := range bs {
		out[i] = b.Status()
	}
	return out
}
