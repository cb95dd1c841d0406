package bench

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// BenchmarkThroughput burns down b.N no-op jobs; only the burn-down is
// timed (ns/op is the time per job), the pre-insert is not.
//
//	go test -run '^$' -bench Throughput -benchtime 20000x ./bench
func BenchmarkThroughput(b *testing.B) {
	b.StopTimer()
	cfg := Config{ErrorLog: io.Discard, WorkStarted: b.StartTimer, WorkDone: b.StopTimer}
	res, err := Throughput(context.Background(), cfg, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.Rate, "jobs/s")
	b.ReportMetric(res.InsertRate, "insert-jobs/s")
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tredrive\nVmPeak:\t  200000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 1000 kB\n"
	got, err := parseVmRSS([]byte(status))
	if err != nil || got != 12345*1024 {
		t.Errorf("parseVmRSS = %d, %v; want %d", got, err, 12345*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded", bad)
		}
	}
	if rss, err := ReadRSS(); err == nil && rss <= 0 {
		t.Errorf("ReadRSS = %d", rss)
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	want := Percentiles{N: 200, Min: Duration(time.Millisecond), P50: Duration(101 * time.Millisecond),
		P99: Duration(199 * time.Millisecond), Max: Duration(200 * time.Millisecond), Mean: Duration(100500 * time.Microsecond)}
	if p != want {
		t.Errorf("percentiles = %+v, want %+v", p, want)
	}
	if ds[0] != 200*time.Millisecond {
		t.Error("percentiles sorted its input")
	}
	if (percentiles(nil) != Percentiles{}) {
		t.Error("percentiles of nothing are not zero")
	}
}

func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{{Workers: -1}, {FetchBatch: -1}, {Synchronous: "off"}, {InsertBatch: -1},
		{InsertBatch: 10001}, {Processes: -1}, {Processes: 2}, {Processes: 2, DatabaseURL: "postgres:///x"}} {
		if _, err := Throughput(ctx, cfg, 1); err == nil {
			t.Errorf("Throughput accepted %+v", cfg)
		}
	}
	if _, err := Throughput(ctx, Config{}, 0); err == nil {
		t.Error("Throughput accepted 0 jobs")
	}
	if _, err := Continuous(ctx, Config{}, ContinuousParams{Producers: 1, Batch: 1, Duration: 1, Warmup: 1}); err == nil {
		t.Error("Continuous accepted a duration no longer than the warm-up")
	}
	ok := ContinuousParams{Producers: 1, Batch: 1, Duration: 2, Warmup: 1}
	for _, bad := range []func(*ContinuousParams){
		func(p *ContinuousParams) { p.RetryEvery = -1 },
		func(p *ContinuousParams) { p.RetryEvery, p.RetryDelay = 10, 0 },
		func(p *ContinuousParams) { p.RetryWorkers = -1 },
		func(p *ContinuousParams) { p.BurnDown = -1 },
	} {
		p := ok
		bad(&p)
		if _, err := Continuous(ctx, Config{}, p); err == nil {
			t.Errorf("Continuous accepted %+v", p)
		}
	}
}

func TestCheckFailureKeepsResult(t *testing.T) {
	var c checks
	c.expect("x", 1, 1)
	if c.err("w") != nil {
		t.Error("a passing check failed")
	}
	c.expect("store completed", 9, 10)
	if err := c.err("w"); !errors.Is(err, ErrCheck) || err.Error() != "bench: check failed: w: store completed is 9, want 10" {
		t.Errorf("err = %v", err)
	}
}

func TestWorkerProcessArgs(t *testing.T) {
	p := WorkerProcess{DatabaseURL: "postgres:///b", Schema: "s", Mode: ModeLateness, Workers: 7, FetchBatch: 3,
		RetryBudget: true, RetryDelay: 1500 * time.Millisecond}
	got := strings.Join(p.Args(), " ")
	want := "--database-url postgres:///b --schema s --mode lateness --workers 7 --fetch-batch 3 --retry-budget=true --retry-delay 1.5s"
	if got != want {
		t.Errorf("Args = %q, want %q", got, want)
	}
	if err := ServeWorker(context.Background(), WorkerProcess{Mode: "other"}, strings.NewReader(""), io.Discard, io.Discard); err == nil {
		t.Error("ServeWorker accepted an unknown mode")
	}
}
