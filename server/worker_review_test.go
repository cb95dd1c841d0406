package server

import (
	"context"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// FINDING: an outcome that the store turns into a cancellation (a retry,
// a snooze or a release of a job whose cancellation was requested after
// the worker last heard of it) was answered with the state the outcome
// would have left the job in ("scheduled", "pending", with a run_at),
// not "canceled", which the job is.
func TestWorkerOutcomeAnswersCanceled(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		var jobs []int64
		for range 3 {
			jobs = append(jobs, e.enqueue().ID)
		}
		a := e.lease("py-1@box-a", 3, "")
		if len(a.Jobs) != 3 {
			t.Fatalf("leased %d jobs, want 3", len(a.Jobs))
		}
		leases := map[int64]int64{}
		for _, lj := range a.Jobs {
			leases[lj.ID] = lj.Lease
		}
		// Canceled while they run, with no heartbeat since: the worker
		// does not know, and reports as it would have.
		for _, id := range jobs {
			if _, err := e.client.Cancel(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		got := e.outcomes("py-1@box-a",
			OutcomeItem{ID: jobs[0], Lease: leases[jobs[0]], Outcome: "fail", Class: "transient", Error: "boom"},
			OutcomeItem{ID: jobs[1], Lease: leases[jobs[1]], Outcome: "snooze", Delay: "1h"},
			OutcomeItem{ID: jobs[2], Lease: leases[jobs[2]], Outcome: "release"})
		for i, st := range got {
			j := e.get(jobs[i])
			if j.State != store.Canceled {
				t.Fatalf("job %d is %s after outcome %d, want canceled", j.ID, j.State, i)
			}
			if st.Status != 200 || st.State != store.Canceled || st.RunAt != nil {
				t.Errorf("outcome %d answered %d %q run_at %v; the job is canceled", i, st.Status, st.State, st.RunAt)
			}
		}
	})
}
