package redrive

import "time"

// SetStatsClock sets the clock of the statistics history (the minutes of
// the worker's snapshots and of Series' live point) of c and of the
// workers created from it. Call it before starting a worker.
func SetStatsClock(c *Client, now func() time.Time) { c.statsClock = now }

// EngineSignal returns a test signal the worker's loops send on after
// each round of their work: a batch of outcomes written, a rescue, a
// cleanup, a heartbeat or a progress write, a refresh of the paused
// queues. A test waiting for the engine to change a job looks again at
// each signal instead of sleeping. Call it before Run.
func EngineSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.completer.loop.signal = s
	w.rescuer.signal = s
	w.cleaner.signal = s
	w.heartbeater.signal = s
	w.pauser.signal = s
	return s
}

// RescueSignal returns a test signal the worker's rescuer sends on after
// each round (a rescue of expired leases and of this host's gone
// workers). Call it before Run.
func RescueSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.rescuer.signal = s
	return s
}

// SeriesSignal returns a test signal the worker's series writer sends on
// after each round: a look at the statistics clock, and the snapshot of
// its minute when this worker leads and had not recorded it. Call it
// before Run.
func SeriesSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.seriesWriter.signal = s
	return s
}

// OperationsSignal returns a test signal the worker's operator sends on
// after each batch of the operation it runs and after each round (every
// runnable operation claimed and run, or none while it does not lead).
// Call it before Run.
func OperationsSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.operator.signal = s
	return s
}

// PeriodicSignal returns a test signal the worker's scheduler sends on
// after each round: its schedules declared, and what was due enqueued
// when this worker leads. Call it before Run.
func PeriodicSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.scheduler.signal = s
	return s
}

// BreakerSignal returns a test signal the worker's breaker sharer sends
// on after each sync of its breakers with the store. Call it before Run.
func BreakerSignal(w *Worker) <-chan struct{} {
	s := newTestSignal()
	w.breakerSharer.signal = s
	return s
}

// SetClock sets the clock of c and of the workers created from it: the
// times they write (run_at, lease_until, outcomes) and compare with
// (leases expired, jobs due). The loops still wait on real timers. Call
// it before creating a worker from c.
func SetClock(c *Client, now func() time.Time) { c.setClock(now) }

// RemoteInflight returns how many attempts r keeps in memory.
func RemoteInflight(r *RemoteWorkers) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// RemoteKnown returns how many remote workers r keeps in memory.
func RemoteKnown(r *RemoteWorkers) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.workers)
}

// ProcessInstance returns this process's boot and PID namespace ("" when
// the system does not say).
func ProcessInstance() string { return thisProcess().instance }
