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
