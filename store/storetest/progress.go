package storetest

import (
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// progress calls Progress and fails on an error.
func (x *h) progress(worker string, updates ...store.ProgressUpdate) {
	x.t.Helper()
	if err := x.s.Progress(x.ctx, worker, updates); err != nil {
		x.t.Fatalf("Progress(%q, %d updates): %v", worker, len(updates), err)
	}
}

// progressOf is an update of the leased job j's attempt.
func progressOf(j *store.Job, done, total int64, when time.Time) store.ProgressUpdate {
	return store.ProgressUpdate{JobID: j.ID, Lease: j.Lease, JobProgress: store.JobProgress{Done: done, Total: total, At: when}}
}

// checkProgress fails unless the job's progress is want (nil: none).
func (x *h) checkProgress(what string, id int64, want *store.JobProgress) {
	x.t.Helper()
	if got := x.get(id).Progress; fmtProgress(got) != fmtProgress(want) {
		x.t.Errorf("%s: job %d: Progress = %s, want %s", what, id, fmtProgress(got), fmtProgress(want))
	}
}

// testProgress: an update applies only to a job running that lease for
// that worker; Get and List show the latest; the other fields stay.
func testProgress(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	a, b := jobs[0], jobs[1]
	pending := x.enqueue(at(0), store.NewJob{Queue: "other", Kind: "k"})[0]
	before := x.get(a.ID)
	x.checkProgress("leased job before any progress", a.ID, nil)

	x.progress("w1") // nothing to do
	x.progress("w2", progressOf(a, 10, 100, at(time.Second)))
	x.checkProgress("progress from another worker", a.ID, nil)
	stale := progressOf(a, 10, 100, at(time.Second))
	stale.Lease = a.Lease + 1
	x.progress("w1", stale)
	x.checkProgress("progress of another lease", a.ID, nil)
	x.progress("w1", store.ProgressUpdate{JobID: pending.ID, Lease: pending.Lease, JobProgress: store.JobProgress{Done: 1, Total: 2, At: at(time.Second)}},
		store.ProgressUpdate{JobID: missingID, Lease: 1, JobProgress: store.JobProgress{Done: 1, At: at(time.Second)}})
	x.checkProgress("progress of a pending job", pending.ID, nil)

	x.progress("w1", progressOf(a, 10, 100, at(time.Second)), progressOf(b, 7, 0, at(time.Second)))
	x.checkProgress("progress of the leasing worker", a.ID, &store.JobProgress{Done: 10, Total: 100, At: at(time.Second)})
	x.checkProgress("progress with an unknown total", b.ID, &store.JobProgress{Done: 7, Total: 0, At: at(time.Second)})
	x.progress("w1", progressOf(a, 1<<40, 1<<41, at(2*time.Second)))
	want := &store.JobProgress{Done: 1 << 40, Total: 1 << 41, At: at(2 * time.Second)}
	x.checkProgress("latest progress", a.ID, want)
	w := clone(before)
	w.Progress = want
	x.checkJob("job with progress", x.get(a.ID), w)

	listed := x.list(store.Filter{States: []store.State{store.Running}}, store.Page{})
	found := false
	for _, j := range listed.Jobs {
		if j.ID == a.ID {
			found = true
			if fmtProgress(j.Progress) != fmtProgress(want) {
				x.t.Errorf("List: job %d: Progress = %s, want %s", a.ID, fmtProgress(j.Progress), fmtProgress(want))
			}
		}
	}
	if !found {
		x.t.Errorf("List(running) did not return job %d", a.ID)
	}

	// A heartbeat keeps the progress.
	x.heartbeat("w1", []*store.Job{a}, at(2*time.Minute))
	x.checkProgress("progress after a heartbeat", a.ID, want)
}

// testProgressOutcomes: a completion keeps the attempt's last progress
// (the outcome's when it carries one); every other outcome clears it, and
// an update after the attempt ended changes nothing.
func testProgressOutcomes(x *h) {
	var specs []store.NewJob
	for range 8 {
		specs = append(specs, store.NewJob{Queue: "q", Kind: "k"})
	}
	jobs := x.leaseNew(at(0), "w1", specs...)
	var ups []store.ProgressUpdate
	for _, j := range jobs {
		ups = append(ups, progressOf(j, 5, 10, at(time.Second)))
	}
	x.progress("w1", ups...)
	end := at(2 * time.Second)
	final := &store.JobProgress{Done: 10, Total: 10, At: end}

	keep := completeOf(jobs[0], end)
	withFinal := completeOf(jobs[1], end)
	withFinal.Progress = final
	retry := retryOf(jobs[2], end, at(time.Hour), failure.Transient, "boom")
	bury := buryOf(jobs[3], end, failure.Permanent, "permanent", "fp", "boom")
	snooze := outcome(jobs[4], store.Snooze, end)
	snooze.RunAt = at(time.Hour)
	release := outcome(jobs[5], store.Release, end)
	cancel := outcome(jobs[6], store.Cancel, end)
	// Progress on a non-completing outcome is ignored: it still clears.
	retryWith := retryOf(jobs[7], end, at(time.Hour), failure.Transient, "boom")
	retryWith.Progress = final
	x.finish(keep, withFinal, retry, bury, snooze, release, cancel, retryWith)

	x.checkProgress("completed without final progress", jobs[0].ID, &store.JobProgress{Done: 5, Total: 10, At: at(time.Second)})
	x.checkProgress("completed with final progress", jobs[1].ID, final)
	for i, what := range []string{"retried", "dead", "snoozed", "released", "canceled", "retried with progress"} {
		x.checkProgress(what+" job", jobs[i+2].ID, nil)
	}
	// Stale updates of the ended attempts change nothing.
	x.progress("w1", ups...)
	x.checkProgress("completed job after a stale update", jobs[1].ID, final)
	x.checkProgress("released job after a stale update", jobs[5].ID, nil)

	// A completion carrying progress when none was sent keeps it; the
	// next attempt of a released job starts without progress.
	fresh := x.leaseNew(at(3*time.Second), "w2", store.NewJob{Queue: "fresh", Kind: "k"})[0]
	o := completeOf(fresh, at(4*time.Second))
	o.Progress = &store.JobProgress{Done: 3, Total: -1, At: at(4 * time.Second)}
	x.finish(o)
	x.checkProgress("completed with only final progress", fresh.ID, o.Progress)

	again := x.fetchWant(store.FetchParams{Queue: "q", Limit: 10, Now: at(3 * time.Second), LeaseUntil: at(time.Minute), Worker: "w2"}, jobs[5].ID)[0]
	x.checkProgress("next attempt of the released job", again.ID, nil)
	x.progress("w2", progressOf(again, 1, 2, at(4*time.Second)))
	x.checkProgress("next attempt's progress", again.ID, &store.JobProgress{Done: 1, Total: 2, At: at(4 * time.Second)})
}
