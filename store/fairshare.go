package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Fair shares: the jobs of a queue made fair (NewJob.Fair) carry a fair
// key, and a fetch takes the due ones by deficit round robin over their
// keys: in each round a key gives up to its weight (FetchParams.FairWeights,
// 1 by default) of its due jobs, oldest due first, and the round goes on
// with the next key in key order, wrapping around. A fetch reads the keys
// one at a time (one probe of the store's index of waiting fair jobs a
// key) from where the process's previous fetch of the queue stopped
// (FairCursors), so that no key is favoured by being first in key order.
// Priorities stay strict: a priority's keys are served before any key of
// a lower one.

// FairUse is the part of a Store that reads jobs' fair keys.
type FairUse interface {
	// JobFairKey returns the fair key of the job id; ok is false when it
	// has none (its queue was not fair when it was enqueued) or there is
	// no such job.
	JobFairKey(ctx context.Context, id int64) (key string, ok bool, err error)
}

// MaxFairWeight bounds a fair key's weight.
const MaxFairWeight = 10_000

// CheckFairWeight reports, as an ErrInvalid error, a weight out of [1,
// MaxFairWeight].
func CheckFairWeight(w int) error {
	if w < 1 || w > MaxFairWeight {
		return fmt.Errorf("%w: fair weight %d is out of range [1, %d]", ErrInvalid, w, MaxFairWeight)
	}
	return nil
}

// CheckNewFair reports, as an ErrInvalid error, the fair key of a new job
// that no store keeps: a key without Fair, or one longer than
// MaxLimitName bytes, not UTF-8 or holding a NUL. Stores call it from
// Enqueue.
func CheckNewFair(nj *NewJob) error {
	if !nj.Fair {
		if nj.FairKey != "" {
			return fmt.Errorf("%w: fair key without Fair", ErrInvalid)
		}
		return nil
	}
	if len(nj.FairKey) > MaxLimitName || !utf8.ValidString(nj.FairKey) || strings.ContainsRune(nj.FairKey, 0) {
		return fmt.Errorf("%w: fair key is longer than %d bytes, not UTF-8 or holds a NUL", ErrInvalid, MaxLimitName)
	}
	return nil
}

// FairCursor is where a process's round robin over a queue's fair keys
// stopped: the key it served last, and how many jobs that key has taken
// of its weight in the current round.
type FairCursor struct {
	Key  string
	Used int
	Set  bool // false: start at the first key
}

// FairCursors keeps the cursor of each queue and priority, for one
// process (a store). The zero value is ready to use.
//
// A store whose write transactions run one at a time (SQLite's writer)
// moves a cursor with Stage in a fetch's transaction, then Commit once
// the transaction commits or Discard once it rolls back, so that a fetch
// rolled back costs no key its turn, and a later fetch in the same
// transaction sees the moves of the earlier ones. A store that moves
// cursors only after its transaction committed uses Put.
type FairCursors struct {
	mu     sync.Mutex
	m      map[string]map[int64]FairCursor // by queue, then priority
	n      int                             // the cursors in m
	staged map[fairLevel]FairCursor        // the moves of the transaction under way
}

type fairLevel struct {
	queue string
	prio  int64
}

// Get returns the cursor of queue's priority prio: the one staged in the
// transaction under way, if any, else the last one put or committed.
func (c *FairCursors) Get(queue string, prio int64) FairCursor {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.staged[fairLevel{queue, prio}]; ok {
		return cur
	}
	return c.m[queue][prio]
}

// Queue returns the cursors of queue's priorities (as Get returns them),
// by priority: a store that walks the priorities in the database takes
// them all.
func (c *FairCursors) Queue(queue string) map[int64]FairCursor {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]FairCursor, len(c.m[queue]))
	for prio, cur := range c.m[queue] {
		out[prio] = cur
	}
	for l, cur := range c.staged {
		if l.queue == queue {
			out[l.prio] = cur
		}
	}
	return out
}

// Put sets the cursor of queue's priority prio.
func (c *FairCursors) Put(queue string, prio int64, cur FairCursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(fairLevel{queue, prio}, cur)
}

func (c *FairCursors) put(l fairLevel, cur FairCursor) {
	if c.m == nil || c.n > maxFairCursors {
		c.m, c.n = map[string]map[int64]FairCursor{}, 0 // a bound on memory: a cleared cursor starts at the first key
	}
	q := c.m[l.queue]
	if q == nil {
		q = map[int64]FairCursor{}
		c.m[l.queue] = q
	}
	if _, ok := q[l.prio]; !ok {
		c.n++
	}
	q[l.prio] = cur
}

// Stage sets the cursor of queue's priority prio in the transaction under
// way: Get returns it from now on, and it takes effect with Commit or is
// dropped by Discard.
func (c *FairCursors) Stage(queue string, prio int64, cur FairCursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.staged == nil {
		c.staged = map[fairLevel]FairCursor{}
	}
	c.staged[fairLevel{queue, prio}] = cur
}

// Commit makes the staged cursors the cursors: their transaction
// committed.
func (c *FairCursors) Commit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, cur := range c.staged {
		c.put(l, cur)
	}
	clear(c.staged)
}

// Discard drops the staged cursors: their transaction rolled back, and
// the keys it served are served again.
func (c *FairCursors) Discard() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.staged)
}

// maxFairCursors bounds the cursors a process keeps.
const maxFairCursors = 100_000

// MaxFairVisits bounds the keys one fetch visits at one priority: a
// queue with more keys holding waiting jobs than that, none of them due,
// costs a fetch that many probes, and the next fetch goes on from there.
const MaxFairVisits = 2048

// FairUnkeyed is the place, in a priority's round robin, of the due jobs
// of the priority without a fair key (enqueued by a process not
// configured fair): they take turns as one more key, of weight 1, after
// every key in key order (a key is UTF-8, which never holds the byte
// 0xff, so every key sorts before it), oldest due first. A store's take
// function receives it as the key of those jobs; it never reaches a
// store's next function.
const FairUnkeyed = "\xff"

// FairLevel is FairRound over one priority's keys and, when unkeyed is
// true (the priority has due jobs without a fair key), FairUnkeyed after
// them: next walks the priority's keys only, and take is asked for
// FairUnkeyed's jobs too. A cursor left at FairUnkeyed goes on at the
// first key, whether or not the priority still has jobs without a key.
func FairLevel(cur FairCursor, weights map[string]int, want int, unkeyed bool,
	next func(after string, first bool) (string, bool, error),
	take func(key string, n int) (int, error)) (FairCursor, int, error) {
	walk := func(after string, first bool) (string, bool, error) {
		if !first && after == FairUnkeyed {
			return "", false, nil // past the last place: FairRound wraps around
		}
		k, ok, err := next(after, first)
		if err != nil || ok || !unkeyed {
			return k, ok, err
		}
		return FairUnkeyed, true, nil
	}
	return FairRound(cur, weights, want, walk, take)
}

// FairRound runs a fetch's deficit round robin over the keys of one
// priority, taking up to want jobs: next returns the first key after
// after in key order (the first key when first is true), ok false when
// there is none; take leases up to n due jobs of key, oldest due first,
// and returns how many it leased. cur is where the previous fetch
// stopped, and FairRound returns where this one stops and how many jobs
// it took. It stops when it has want jobs, or when a whole turn over the
// keys took nothing (every key's due jobs are taken), or after
// MaxFairVisits keys.
func FairRound(cur FairCursor, weights map[string]int, want int,
	next func(after string, first bool) (string, bool, error),
	take func(key string, n int) (int, error)) (FairCursor, int, error) {
	weight := func(k string) int {
		if k == FairUnkeyed {
			return 1
		}
		if w, ok := weights[k]; ok && w > 0 {
			return w
		}
		return 1
	}
	got := 0
	var idleFrom *string // the first key of the current streak of keys that gave nothing
	// A fetch goes round the keys in turns. Once a turn is over, the next
	// ones take m times each key's weight, m as large as lets every key
	// that gave its whole weight in the last turn (the keys with a
	// backlog) do so again within want: the same shares in fewer visits
	// (one key left with a backlog is two visits a fetch, not one a job).
	//
	// A turn at m > 1 reserves each such key's m times its weight: a key
	// that was not among them (one whose jobs were enqueued by another
	// process while the fetch ran, which a fetch of several statements
	// sees on PostgreSQL) takes only what the reservations leave, so that
	// it never ends the fetch before a key with a backlog has had its
	// turn (which would leave that key m-1 rounds behind the others for
	// good: nothing catches up).
	var turnStart *string
	prev := "" // the key visited before this one
	m, sumW := 1, 0
	full := map[string]bool{}     // the keys that gave their whole quota this turn
	reserved := map[string]bool{} // the keys this turn reserves m times the weight of
	reservedLeft := 0             // what the reserved keys not visited yet hold
	for visits := 0; got < want && visits < MaxFairVisits; visits++ {
		var key string
		quota := 0
		resumed, wrapped := false, false
		if cur.Set && cur.Used > 0 && cur.Used < weight(cur.Key) && visits == 0 {
			// The key the previous fetch stopped in the middle of: it
			// takes the rest of its weight first.
			key, quota, resumed = cur.Key, weight(cur.Key)-cur.Used, true
		} else {
			k, ok, err := next(cur.Key, !cur.Set)
			if err != nil {
				return cur, got, err
			}
			if !ok {
				if !cur.Set {
					return cur, got, nil // no key at all
				}
				// Past the last key: wrap around.
				wrapped = true
				if k, ok, err = next("", true); err != nil {
					return cur, got, err
				} else if !ok {
					return FairCursor{}, got, nil
				}
			}
			key = k
			cur = FairCursor{Key: key, Set: true}
		}
		if idleFrom != nil && *idleFrom == key {
			break // a whole turn over the keys took nothing
		}
		switch {
		case turnStart == nil:
			k := key
			turnStart = &k
		case !wrapped && prev < *turnStart && *turnStart <= key,
			wrapped && (prev < *turnStart || *turnStart <= key):
			// A new turn: the walk from prev to key went past where the
			// turn started (whose key may have left, its jobs taken, and
			// all the keys after it too).
			k := key
			turnStart = &k
			if sumW > 0 {
				m = max(1, (want-got)/sumW)
			}
			clear(reserved)
			reservedLeft = 0
			if m > 1 {
				reserved, full = full, reserved
				reservedLeft = m * sumW
			}
			clear(full)
			sumW = 0
		}
		prev = key
		if !resumed {
			quota = weight(key) * m
		}
		if reserved[key] {
			delete(reserved, key)
			reservedLeft -= quota
		} else if reservedLeft > 0 {
			// A key without a reservation: what the reserved keys leave.
			quota = min(quota, max(0, want-got-reservedLeft))
			if quota == 0 {
				cur.Used = weight(key) // it has its turn in the next fetch
				continue
			}
		}
		ask := min(quota, want-got)
		n, err := take(key, ask)
		if err != nil {
			return cur, got, err
		}
		got += n
		switch {
		case n == 0:
			if idleFrom == nil {
				k := key
				idleFrom = &k
			}
			cur.Used = weight(key)
		case n < ask:
			// The key has no more due jobs: its turn is over.
			idleFrom = nil
			cur.Used = weight(key)
		case ask < quota && m == 1:
			// The fetch has what it wants in the middle of the key's
			// weight: the next fetch gives the key the rest first.
			idleFrom = nil
			cur.Used = weight(key) - quota + n
		default:
			idleFrom = nil
			cur.Used = weight(key)
			sumW += weight(key) // a key with a backlog: it takes its share of the next turn
			full[key] = true
		}
	}
	return cur, got, nil
}

// FairProbeEvery is how often a fetch of a queue not known to have fair
// jobs asks the store whether it has some, and how long a queue found to
// have fair jobs is taken to have them without asking (see FairHints).
const FairProbeEvery = time.Second

// FairHints remembers, for one process (a store), which queues have fair
// jobs, so that a fetch of a queue without any pays no probe for them
// but once a FairProbeEvery: a queue has fair jobs when the process is
// configured fair for it (FetchParams.FairWeights not nil), has enqueued
// fair jobs to it lately (Mark), or was found to have some by a probe
// lately. A process not configured fair still leases a fair queue's jobs
// (by the same round robin, every key of weight 1) within a
// FairProbeEvery of another process enqueuing them. The zero value is
// ready to use.
type FairHints struct {
	mu sync.Mutex
	m  map[string]*fairHint
}

type fairHint struct{ seen, asked time.Time }

func (h *FairHints) get(queue string) *fairHint {
	if h.m == nil {
		h.m = map[string]*fairHint{}
	}
	x, ok := h.m[queue]
	if !ok {
		if len(h.m) > 10_000 {
			clear(h.m)
		}
		x = &fairHint{}
		h.m[queue] = x
	}
	return x
}

// Mark records that queue has fair jobs now.
func (h *FairHints) Mark(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.get(queue).seen = time.Now()
}

// Check tells a fetch with p whether to run the fair selection (fair),
// or else whether to ask the store first (probe; then Mark the queue if
// it has fair jobs).
func (h *FairHints) Check(p *FetchParams) (fair, probe bool) {
	if p.FairWeights != nil {
		return true, false
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.get(p.Queue)
	if now.Sub(x.seen) < FairProbeEvery {
		return true, false
	}
	if now.Sub(x.asked) < FairProbeEvery {
		return false, false
	}
	x.asked = now
	return false, true
}
