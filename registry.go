package redrive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// WorkerInfo describes a worker process registered in the store.
type WorkerInfo = store.WorkerInfo

// Worker states reported by Client.Workers.
const (
	// WorkerLive: running, and it said so within WorkerSilentAfter.
	WorkerLive = "live"
	// WorkerSilent: not stopped, but silent for longer than
	// WorkerSilentAfter (a hung or killed process on another host; its
	// leases expire and are rescued).
	WorkerSilent = "silent"
	// WorkerStopped: it stopped cleanly.
	WorkerStopped = "stopped"
	// WorkerGone: another worker found its process gone and rescued its
	// jobs.
	WorkerGone = "gone"
)

// WorkerSilentAfter is how long a worker may go without a heartbeat
// before Client.Workers reports it silent. Workers heartbeat every third
// of their lease (10 s by default).
const WorkerSilentAfter = time.Minute

// WorkerStatus is a registered worker and what became of it.
type WorkerStatus struct {
	WorkerInfo
	// State is WorkerLive, WorkerSilent, WorkerStopped or WorkerGone.
	State string `json:"state"`
	// Remote is set on a worker in another process that takes its jobs
	// through the worker protocol (RemoteWorkers): a Python or Node.js
	// worker of `redrive serve`'s HTTP worker protocol.
	Remote bool `json:"remote"`
}

// Workers returns the worker processes registered in the store, the most
// recently started first, with their state and running jobs.
func (c *Client) Workers(ctx context.Context) ([]WorkerStatus, error) {
	ws, err := c.store.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: workers: %w", err)
	}
	now := c.now()
	out := make([]WorkerStatus, len(ws))
	for i, w := range ws {
		out[i] = WorkerStatus{WorkerInfo: w, State: workerState(w, now), Remote: w.Version == RemoteVersion}
	}
	return out, nil
}

// workerState is w's state at now: WorkerLive, WorkerSilent,
// WorkerStopped or WorkerGone.
func workerState(w WorkerInfo, now time.Time) string {
	switch {
	case w.StoppedAt != nil && strings.HasPrefix(w.StopReason, "gone"):
		return WorkerGone
	case w.StoppedAt != nil:
		return WorkerStopped
	case now.Sub(w.HeartbeatAt) > WorkerSilentAfter:
		return WorkerSilent
	}
	return WorkerLive
}

// ReasonWorkerGone is the reason of the failed attempt recorded for a job
// whose worker's process was found gone.
const ReasonWorkerGone = "worker_gone"

// processIdentity is this process's host, PID and instance (boot and PID
// namespace), as registered.
type processIdentity struct {
	host     string
	pid      int
	instance string
}

var (
	selfOnce sync.Once
	self     processIdentity
)

// thisProcess returns this process's identity.
func thisProcess() processIdentity {
	selfOnce.Do(func() {
		host, _ := os.Hostname()
		self = processIdentity{host: host, pid: os.Getpid(), instance: processInstance()}
	})
	return self
}

// ownWorkers holds the IDs of the workers this process registered: a
// worker with this process's PID is a predecessor that reused the PID
// only when it is not one of them.
var ownWorkers sync.Map

// moduleVersion is the version of the redrive module this binary was
// built with: the module's version when it is a dependency, else the main
// module's version, with the VCS revision when known.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const path = "github.com/redrivehq/redrive"
	if bi.Main.Path != path {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}

// register records the worker in the store's registry.
func (w *Worker) register(ctx context.Context) {
	ownWorkers.Store(w.id, struct{}{})
	p := thisProcess()
	now := w.client.now()
	err := w.store.RegisterWorker(ctx, WorkerInfo{ID: w.id, Host: p.host, PID: p.pid, Instance: p.instance,
		Version: moduleVersion(), Queues: w.opts.Queues, Kinds: w.exec.Kinds(), StartedAt: now, HeartbeatAt: now})
	if err != nil {
		w.log.Warn("registering the worker failed; its jobs are rescued by lease expiry only", "worker", w.id, "error", err)
	}
}

// deregister marks the worker stopped, after a clean shutdown.
func (w *Worker) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.store.StopWorker(ctx, w.id, w.client.now(), WorkerStopped); err != nil {
		w.log.Warn("marking the worker stopped failed", "worker", w.id, "error", err)
	}
}

// heartbeatRegistry tells the registry the worker is alive; a worker
// another one wrongly found gone registers again.
func (w *Worker) heartbeatRegistry(ctx context.Context) {
	err := w.store.HeartbeatWorker(ctx, w.id, w.client.now())
	if errors.Is(err, store.ErrNotFound) {
		w.log.Warn("this worker was marked stopped or pruned from the registry; registering again", "worker", w.id)
		w.register(ctx)
		return
	}
	if err != nil && ctx.Err() == nil {
		w.log.Warn("registry heartbeat failed", "worker", w.id, "error", err)
	}
}

// rescueGone rescues at once the jobs of workers that ran on this host,
// in this boot and PID namespace, and whose process no longer runs (or
// was replaced by this one, with the same PID, as a container's first
// process is): they cannot finish their attempts, so waiting for their
// leases to expire would only delay the jobs. Workers elsewhere are left
// to lease expiry.
func (w *Worker) rescueGone(ctx context.Context) {
	me := thisProcess()
	if me.instance == "" {
		return
	}
	ws, err := w.store.Workers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reading the worker registry failed", "error", err)
		}
		return
	}
	for _, other := range ws {
		if other.ID == w.id || other.StoppedAt != nil || other.Host != me.host || other.Instance != me.instance {
			continue
		}
		var why string
		switch {
		case other.PID == me.pid:
			if _, mine := ownWorkers.Load(other.ID); mine {
				continue // another worker of this very process
			}
			why = fmt.Sprintf("its process %d was replaced by this one", other.PID)
		case !processAlive(other.PID):
			why = fmt.Sprintf("its process %d no longer runs", other.PID)
		default:
			continue
		}
		w.rescueWorker(ctx, other, why)
	}
}

// rescueWorker marks a gone worker stopped and rescues its running jobs,
// each as a failed attempt (Transient, worker_gone) decided by the job's
// policy, fenced on the gone worker's lease.
func (w *Worker) rescueWorker(ctx context.Context, gone WorkerInfo, why string) {
	w.log.Warn("worker gone: rescuing its jobs now instead of at lease expiry", "gone_worker", gone.ID, "host", gone.Host,
		"why", why, "running", gone.Running)
	if err := w.store.StopWorker(ctx, gone.ID, w.client.now(), "gone: "+why); err != nil {
		w.log.Warn("marking the gone worker stopped failed", "gone_worker", gone.ID, "error", err)
	}
	for ctx.Err() == nil {
		jobs, err := w.store.Leased(ctx, gone.ID, 500)
		if err != nil || len(jobs) == 0 {
			if err != nil && ctx.Err() == nil {
				w.log.Error("listing the gone worker's jobs failed; their leases will expire", "gone_worker", gone.ID, "error", err)
			}
			return
		}
		now := w.client.now()
		outs := make([]store.Outcome, len(jobs))
		for i, j := range jobs {
			v := failure.Verdict{Class: failure.Transient, Reason: ReasonWorkerGone}
			o := w.exec.Fail(j, v, fmt.Sprintf("worker %s is gone: %s", gone.ID, why), attemptStart(j, now), now)
			o.Worker = j.Worker
			o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatRescued, N: 1})
			outs[i] = o
		}
		applied, err := w.store.Finish(ctx, outs)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("recording the gone worker's jobs failed; their leases will expire", "gone_worker", gone.ID, "error", err)
			}
			return
		}
		n := 0
		for i, o := range outs {
			if applied[i] {
				n++
				w.log.Warn("job of a gone worker rescued", jobAttr(jobs[i]), "attempt", o.Attempt, "gone_worker", gone.ID)
				if o.Kind == store.Retry {
					w.client.wake(jobs[i].Queue, o.RunAt)
				}
			}
		}
		if len(jobs) < 500 || n == 0 {
			return
		}
	}
}
