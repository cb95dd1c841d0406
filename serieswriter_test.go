package redrive

import (
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// TestSeriesWriterRecordsMinutes: a worker that does not lead records no
// snapshot; the leader's first round records the minute of the
// statistics clock, and a round after the clock crossed into a later
// minute records that one and deletes the snapshots older than
// StatsRetention.
func TestSeriesWriterRecordsMinutes(t *testing.T) {
	clk := clockAt(mins(0).Add(30 * time.Second))
	w, _, st := loopWorker(t, clk, WorkerOptions{StatsRetention: time.Minute})
	var leading atomic.Bool
	w.leading = leading.Load
	minutes := func() []time.Time {
		s, err := st.Snapshots(t.Context(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		out := []time.Time{}
		for _, sn := range s {
			out = append(out, sn.At.UTC())
		}
		return out
	}

	sig := startLoop(t, &w.seriesWriter.loop, w.seriesWriter.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the series writer")
	}
	w.seriesWriter.stop()
	if got := minutes(); len(got) != 0 {
		t.Fatalf("a worker that does not lead recorded %v", got)
	}

	leading.Store(true)
	again := seriesWriter{w: w} // a loop runs once: a new one for the next run
	sig = startLoop(t, &again.loop, again.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the series writer")
	}
	if got, want := minutes(), []time.Time{mins(0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first round: snapshots of %v, want %v", got, want)
	}
	clk.set(mins(2).Add(time.Second))
	waitRounds(t, sig, "the snapshot of minute 2, minute 0 deleted", func() bool {
		return reflect.DeepEqual(minutes(), []time.Time{mins(2)})
	})
}
