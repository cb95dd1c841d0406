package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// BenchmarkListDeadPage measures GET /v1/jobs?limit=50 on a page of dead
// http jobs that each retried 10 times (a history of 11 events with the
// server's answer in each): the listing as it is (summaries, no history)
// and as it was (history=true). It reports the page's size (page-bytes)
// beside the time of one request, alone and with 16 clients at once (the
// time per request of the fleet of clients, the inverse of throughput). docs/BENCHMARKS.md records figures.
func BenchmarkListDeadPage(b *testing.B) {
	st := openStore(b)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet})
	srv := httptest.NewServer(api)
	b.Cleanup(srv.Close)
	b.Cleanup(func() { _ = api.Close() })
	base := time.Now().Add(-time.Hour).UTC()
	answer := `503 Service Unavailable: {"error":"upstream overloaded","detail":"` + strings.Repeat("x", 300) + `"}`
	jobs := make([]store.DeadJob, 50)
	for i := range jobs {
		var hist []store.Event
		for a := 1; a <= 10; a++ {
			hist = append(hist, store.Event{Kind: store.EventRetry, Attempt: a, At: base.Add(time.Duration(a) * time.Second),
				Class: "transient", Error: answer, Delay: store.Duration(time.Duration(a) * time.Second)})
		}
		hist = append(hist, store.Event{Kind: store.EventDead, Attempt: 11, At: base.Add(time.Minute), Class: "transient", Error: answer})
		jobs[i] = store.DeadJob{Queue: "default", Kind: "http", MaxRetries: -1, DeadAt: base.Add(time.Minute), Attempt: 11,
			Payload:    json.RawMessage(fmt.Sprintf(`{"method":"POST","url":"https://api.example.com/hooks/%d","body":"{\"event\":\"paid\"}"}`, i)),
			DeadReason: "retries_exhausted", LastError: answer, LastErrorClass: failure.Transient, Fingerprint: "f", History: hist}
	}
	if _, err := c.AddDead(context.Background(), jobs); err != nil {
		b.Fatal(err)
	}
	for _, shape := range []struct{ name, query string }{{"summaries", ""}, {"history", "&history=true"}} {
		b.Run(shape.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/v1/jobs?limit=50" + shape.query)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d: %v", resp.StatusCode, err)
				}
				size = len(body)
			}
			b.ReportMetric(float64(size), "page-bytes")
		})
		// 16 clients at once on 2 cores (8 per GOMAXPROCS).
		b.Run(shape.name+"-16clients", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := http.Get(srv.URL + "/v1/jobs?limit=50" + shape.query)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
