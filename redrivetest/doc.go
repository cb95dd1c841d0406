// Package redrivetest helps users of redrive test their handlers and the
// code that enqueues jobs.
//
// A Runner runs a handler inline on a job, without a store and without a
// worker: it builds the job as Client.Enqueue would, runs one attempt
// through a redrive.Executor (the code a Worker and the broker transports
// run their attempts through) and applies the outcome to the job as a
// store would. What a test sees (success, a retry with the delay the
// policy chooses, a Retry-After obeyed, a dead job and its reason, the
// error's classification, a snooze, an open breaker's deferral) is what
// the engine decides, because it is the engine that decides it. Jitter
// draws from a seeded source and time from a fake Clock, so a job's whole
// retry schedule can be stepped through, attempt by attempt, in a test
// that takes no time and gives the same delays on every run.
//
// RequireEnqueued and RequireNotEnqueued assert what code under test
// enqueued, on a real store (an SQLite file in t.TempDir() is enough).
// Schedule lists the attempt times of a policy.
//
// Handlers are registered on a Runner as on a Worker (both are
// redrive.Registrars), so that one registration function serves both:
//
//	func register(r redrive.Registrar) {
//		redrive.Handle(r, "email", sendEmail, redrive.Timeout(10*time.Second))
//	}
package redrivetest
