package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// benchPost posts body to the protocol's route and decodes the answer.
func benchPost(b *testing.B, hc *http.Client, url string, body, out any) {
	raw, err := json.Marshal(body)
	if err != nil {
		b.Fatal(err)
	}
	res, err := hc.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d %s", url, res.StatusCode, got)
	}
	if err := json.Unmarshal(got, out); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWorkerProtocolThroughput: b.N no-op jobs through 4 (then 16)
// remote workers over real HTTP, each leasing up to 100 jobs a call and
// reporting their outcomes in one batch, on SQLite and on PostgreSQL
// (REDRIVE_POSTGRES_URL). Reports jobs/s.
func BenchmarkWorkerProtocolThroughput(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		for _, workers := range []int{4, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", kind, workers), func(b *testing.B) {
				benchProtocolThroughput(b, openProtoStore(b, kind), workers)
			})
		}
	}
}

func benchProtocolThroughput(b *testing.B, st store.Store, workers int) {
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	br := breaker.NewRegistry(breaker.DefaultConfig())
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Breakers: br, Logger: quiet})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet, Workers: rw})
	srv := newBenchServer(b, api)
	ctx := context.Background()
	for n := 0; n < b.N; n += 1000 {
		reqs := make([]redrive.Request, min(1000, b.N-n))
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "noop", Queue: "bench", Payload: json.RawMessage(`{"n":1}`)}
		}
		if _, err := c.EnqueueMany(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	done := 0
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			hc := srv.Client()
			name := fmt.Sprintf("bench-%d@host", w)
			for {
				var la LeaseAnswer
				benchPost(b, hc, srv.URL+"/v1/worker/lease", LeaseBody{Worker: name, Queues: []string{"bench"}, Kinds: []string{"noop"}, Max: 100}, &la)
				if len(la.Jobs) == 0 {
					return
				}
				items := make([]OutcomeItem, len(la.Jobs))
				for i, j := range la.Jobs {
					items[i] = OutcomeItem{ID: j.ID, Lease: j.Lease, Outcome: "complete"}
				}
				var oa OutcomesAnswer
				benchPost(b, hc, srv.URL+"/v1/worker/outcomes", OutcomesBody{Worker: name, Outcomes: items}, &oa)
				for _, o := range oa.Outcomes {
					if o.Status != 200 {
						b.Errorf("outcome %+v", o)
					}
				}
				mu.Lock()
				done += len(items)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if done != b.N {
		b.Fatalf("%d jobs done of %d", done, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}

// BenchmarkWorkerLeaseToStart: a remote worker long-polls an empty
// queue; a job is enqueued (in serve's process, through its client);
// measured is the time from the enqueue's call to the worker holding
// the job (its lease answer read). Reports p50 and p99.
func BenchmarkWorkerLeaseToStart(b *testing.B) {
	st := openStore(b)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quiet})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet, Workers: rw})
	srv := newBenchServer(b, api)
	hc := srv.Client()
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		got := make(chan LeaseAnswer, 1)
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			var la LeaseAnswer
			benchPost(b, hc, srv.URL+"/v1/worker/lease", LeaseBody{Worker: "bench@host", Queues: []string{"lat"}, Kinds: []string{"noop"}, Wait: "30s"}, &la)
			got <- la
		}()
		<-waiting
		// Let the long-poll reach its wait (real time passing is what is
		// measured from here: a job enqueued while the worker waits).
		time.Sleep(2 * time.Millisecond)
		t0 := time.Now()
		if _, err := c.Enqueue(ctx, "noop", nil, redrive.InQueue("lat")); err != nil {
			b.Fatal(err)
		}
		la := <-got
		lat = append(lat, time.Since(t0))
		if len(la.Jobs) != 1 {
			b.Fatalf("lease: %+v", la)
		}
		var oa OutcomesAnswer
		benchPost(b, hc, srv.URL+"/v1/worker/outcomes", OutcomesBody{Worker: "bench@host",
			Outcomes: []OutcomeItem{{ID: la.Jobs[0].ID, Lease: la.Jobs[0].Lease, Outcome: "complete"}}}, &oa)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
}

// newBenchServer serves api over real HTTP until the benchmark ends,
// its client keeping a connection per worker.
func newBenchServer(b *testing.B, api *Server) *httptest.Server {
	srv := httptest.NewServer(api)
	srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = 16
	b.Cleanup(srv.Close)
	b.Cleanup(func() { _ = api.Close() })
	return srv
}
