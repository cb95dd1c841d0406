package breaker

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// reportLog is a Shared layer that keeps the reports it is given and
// leaves the breaker's state alone.
type reportLog struct {
	mu      sync.Mutex
	reports []Report
}

func (l *reportLog) Failed(_ string, r Report) (Fleet, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, r)
	return Fleet{}, nil // version 0: Apply ignores it
}

func (l *reportLog) Succeeded(name string, r Report) (Fleet, error) { return l.Failed(name, r) }

func (l *reportLog) Probe(string, time.Time, time.Time) (Fleet, bool, error) {
	return Fleet{}, false, errors.New("no probes here")
}

func (l *reportLog) Probed(string, bool, time.Time, time.Time) (Fleet, error) {
	return Fleet{}, errors.New("no probes here")
}

func (l *reportLog) Fallback() bool { return false }

// TestSharedReportCountsMatchWindow: the counts a ratio-mode breaker
// reports to its Shared layer are those of the window it judged the
// failure by, the failure included, also when the clock went back
// between two failures (the window stays where it was).
func TestSharedReportCountsMatchWindow(t *testing.T) {
	b, clk := newTest(t, Config{})
	log := &reportLog{}
	b.Share(log)
	clk.Advance(time.Hour)
	for range 10 {
		clk.Advance(10 * time.Millisecond)
		call(b, nil)
	}
	call(b, errBoom)
	clk.Advance(-3 * time.Second) // two buckets back
	call(b, errBoom)
	st := b.Status()
	if st.Failures != 2 || st.Requests != 12 {
		t.Fatalf("local window: %+v, want 2 failures in 12 calls", st)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.reports) != 2 {
		t.Fatalf("%d reports, want 2", len(log.reports))
	}
	for i, r := range log.reports {
		if r.Failures != i+1 || r.Requests != 11+i || r.Streak != i+1 {
			t.Errorf("report %d: %d failures in %d calls, %d in a row; want %d in %d, %d in a row (the local window's)",
				i+1, r.Failures, r.Requests, r.Streak, i+1, 11+i, i+1)
		}
	}
}
