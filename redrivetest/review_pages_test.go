package redrivetest

import (
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// Enqueued reads every page of the store's listing: jobs beyond the
// first page are found, each once, oldest first.
func TestEnqueuedReadsEveryPage(t *testing.T) {
	c := newClient(t)
	n := store.MaxPageSize*2 + 7
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "many", Payload: map[string]int{"i": i}}
	}
	if _, err := c.EnqueueMany(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	all := Enqueued(t, c, "many", nil)
	if len(all) != n {
		t.Fatalf("%d jobs, want %d", len(all), n)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("job %d after job %d: not oldest first, or twice", all[i].ID, all[i-1].ID)
		}
	}
	last := RequireEnqueued(t, c, "many", &Match{Payload: map[string]int{"i": n - 1}})
	if len(last) != 1 {
		t.Fatalf("%d jobs match the last payload, want 1", len(last))
	}
}
