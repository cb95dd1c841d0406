package bench

import (
	"testing"
	"time"
)

// TestSoakFate: the fates are spread over the payload numbers in the
// shares asked for, and the same number always has the same fate.
func TestSoakFate(t *testing.T) {
	const n = 1000000
	var count [3]int
	for i := range n {
		// The producers number their jobs k<<32 | seq.
		f := soakFate(i%4<<32|i/4, DefaultSoakTransient, DefaultSoakDead)
		if f != soakFate(i%4<<32|i/4, DefaultSoakTransient, DefaultSoakDead) {
			t.Fatalf("job %d: fate not deterministic", i)
		}
		count[f]++
	}
	for f, want := range map[int]float64{1: DefaultSoakTransient, 2: DefaultSoakDead} {
		if got := float64(count[f]) / n; got < want*0.95 || got > want*1.05 {
			t.Errorf("fate %d: share %v, want %v +- 5%%", f, got, want)
		}
	}
}

// TestSoakGoals judges hand-made rows: the failing rows are named, the
// first row's ratio is not judged, and the plateau compares the last
// third's maximum with the middle third's.
func TestSoakGoals(t *testing.T) {
	p := SoakParams{}.WithDefaults()
	row := func(min int, ratio float64, p99 time.Duration, rss, db int64) SoakSample {
		return SoakSample{At: Duration(time.Duration(min) * time.Minute), Enqueued: 1000, Completed: int64(ratio * 1000), Ratio: ratio,
			RetryLateness: Percentiles{N: 50, P50: Duration(time.Millisecond), P99: Duration(p99)}, RSSMax: rss, DBBytes: db}
	}
	ok := []SoakSample{
		row(1, 0.5, time.Millisecond, 40, 100), row(2, 1, time.Millisecond, 50, 200), row(3, 1, time.Millisecond, 50, 210),
		row(4, 0.99, time.Millisecond, 54, 220), row(5, 1, time.Millisecond, 50, 220), row(6, 1, 2*time.Millisecond, 53, 230),
	}
	for _, g := range soakGoals(p, ok) {
		if g.Status != "PASS" {
			t.Errorf("good rows: %+v", g)
		}
	}
	bad := append([]SoakSample(nil), ok...)
	bad[3] = row(4, 0.9, 6*time.Millisecond, 54, 220)
	bad[5] = row(6, 1, time.Millisecond, 60, 300)
	want := map[string]string{
		"completed/enqueued >= 0.95 every row after the first": "1 rows: t=4m0s: 0.900 (900 of 1000)",
		"retry lateness p99 <= 5ms every row":                  "1 rows: t=4m0s: p99 6ms (n=50)",
	}
	for _, g := range soakGoals(p, bad) {
		switch {
		case want[g.Name] != "":
			if g.Status != "FAIL" || g.Detail != want[g.Name] {
				t.Errorf("%s: %s %q, want FAIL %q", g.Name, g.Status, g.Detail, want[g.Name])
			}
		case g.Status != "FAIL":
			// RSS 60 against 54 (+11%), database 300 against 220.
			t.Errorf("%s: %s %q, want FAIL", g.Name, g.Status, g.Detail)
		}
	}
	for _, g := range soakGoals(p, ok[:2]) {
		if g.Name[:3] != "com" && g.Name[:3] != "ret" && g.Status != "N/A" {
			t.Errorf("2 rows: %+v, want N/A", g)
		}
	}
}
