package redrive

import (
	"reflect"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// TestSeriesPointsLimits: a point of the series of every queue carries
// the use of the limits sampled at the start of its minute (the live
// point, that of the last snapshot); a queue's series carries none.
func TestSeriesPointsLimits(t *testing.T) {
	use := map[string]store.LimitSample{"per-host": {InUse: 7, Busiest: 5}}
	snaps := []store.Snapshot{
		{At: mins(0), Counters: counters{}, Limits: use},
		{At: mins(1), Counters: counters{}},
		{At: mins(2), Counters: counters{}, Limits: map[string]store.LimitSample{"per-host": {InUse: 1, Busiest: 1}}},
	}
	got := seriesPoints(snaps, counters{}, mins(2).Add(10e9), "")
	if len(got) != 3 {
		t.Fatalf("points = %+v, want 3", got)
	}
	if !reflect.DeepEqual(got[0].Limits, use) || got[1].Limits != nil || got[2].Limits["per-host"].InUse != 1 || !got[2].Partial {
		t.Errorf("limits of the points = %+v, %+v, %+v", got[0].Limits, got[1].Limits, got[2].Limits)
	}
	for _, p := range seriesPoints(snaps, counters{}, mins(2).Add(10e9), "q") {
		if p.Limits != nil {
			t.Errorf("a queue's point %s has limits %+v", p.At, p.Limits)
		}
	}
}
