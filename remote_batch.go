package redrive

import (
	"context"
	"errors"

	"github.com/redrivehq/redrive/store"
)

// The outcomes of concurrent worker protocol calls are written together:
// the calls that report outcomes while a batch is being written join the
// next one, written by one store.Finish, as a Worker's completer writes
// its handlers' outcomes (a group commit). A call still waits for its own
// outcomes to be written, and learns which applied: Finish fences each
// outcome on its own (job, lease, worker), so sharing a write changes
// nothing of what applies.

// maxRemoteBatch bounds the outcomes of one shared write; a call that
// would pass it waits for the next write.
const maxRemoteBatch = 4 * MaxRemoteLease

// remoteBatch is a write of outcomes that calls join until it starts.
type remoteBatch struct {
	outs []store.Outcome
	// parts are the [from, to) ranges of outs, one per call, for the
	// write of each alone when the shared one fails on a request error.
	parts [][2]int
	// leases are the pairs in outs: a second outcome of a pair waits for
	// the next write, where the first has changed the job (Finish
	// applies the outcomes of one write in their order, but a store may
	// write a batch in statements that do not see each other's rows).
	leases map[store.Lease]bool
	// applied and errs (one per part) are the write's, set before done
	// is closed.
	applied []bool
	errs    []error
	done    chan struct{}
}

// remoteHooks are a test's hooks into the shared writes (nil: none).
type remoteHooks struct {
	// joined is called once a call's outcomes joined a batch, or found
	// it holding one of their pairs (they wait for the next).
	joined func()
	// write is called before a batch is written, with its calls' count.
	write func(parts int)
}

// finish writes outs, fenced, with the outcomes of the calls under way,
// and returns for each whether it applied. An error means none of outs
// applied.
func (r *RemoteWorkers) finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	for {
		r.wmu.Lock()
		b := r.wopen
		if b != nil && (len(b.outs)+len(outs) > maxRemoteBatch || holdsAny(b.leases, outs)) {
			r.wmu.Unlock()
			if h := r.hooks; h != nil && h.joined != nil {
				h.joined()
			}
			<-b.done
			continue
		}
		lead := b == nil
		if lead {
			b = &remoteBatch{leases: map[store.Lease]bool{}, done: make(chan struct{})}
			r.wopen = b
		}
		from, part := len(b.outs), len(b.parts)
		b.outs = append(b.outs, outs...)
		b.parts = append(b.parts, [2]int{from, len(b.outs)})
		for i := range outs {
			b.leases[store.Lease{JobID: outs[i].JobID, Token: outs[i].Lease}] = true
		}
		prev := r.wlast
		r.wmu.Unlock()
		if h := r.hooks; h != nil && h.joined != nil {
			h.joined()
		}
		if lead {
			// The batch stays open to other calls until the write before
			// it ends: one write at a time, the next one gathering.
			if prev != nil {
				<-prev
			}
			r.wmu.Lock()
			r.wopen, r.wlast = nil, b.done
			r.wmu.Unlock()
			r.writeBatch(ctx, b)
		} else {
			<-b.done
		}
		if err := b.errs[part]; err != nil {
			return nil, err
		}
		return b.applied[from : from+len(outs)], nil
	}
}

// holdsAny reports whether one of outs names a pair of leases.
func holdsAny(leases map[store.Lease]bool, outs []store.Outcome) bool {
	for i := range outs {
		if leases[store.Lease{JobID: outs[i].JobID, Token: outs[i].Lease}] {
			return true
		}
	}
	return false
}

// writeBatch writes b and closes its done. Not interrupted by the client
// going away: the calls of the batch wait for it.
func (r *RemoteWorkers) writeBatch(ctx context.Context, b *remoteBatch) {
	defer close(b.done)
	if h := r.hooks; h != nil && h.write != nil {
		h.write(len(b.parts))
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout())
	defer cancel()
	applied, err := r.store.Finish(fctx, b.outs)
	b.applied, b.errs = applied, make([]error, len(b.parts))
	if err == nil {
		return
	}
	if len(b.parts) == 1 || !errors.Is(err, store.ErrInvalid) {
		for k := range b.errs {
			b.errs[k] = err
		}
		return
	}
	// A request error fails the whole write (the outcomes are checked
	// before, so this is unexpected): each call's outcomes are written
	// alone, and only the call at fault fails.
	b.applied = make([]bool, len(b.outs))
	for k, p := range b.parts {
		ok, err := r.store.Finish(fctx, b.outs[p[0]:p[1]])
		if err != nil {
			b.errs[k] = err
			continue
		}
		copy(b.applied[p[0]:p[1]], ok)
	}
}
