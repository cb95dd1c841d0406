package store_test

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// BenchmarkEncodeJobs encodes a page of 100 jobs as the REST API does:
// half completed (never failed), half dead with a history.
func BenchmarkEncodeJobs(b *testing.B) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	jobs := make([]*store.Job, 100)
	for i := range jobs {
		j := &store.Job{ID: int64(i + 1), Queue: "webhooks", Kind: "http", Payload: json.RawMessage(`{"url":"https://example.com/hook","method":"POST"}`),
			State: store.Completed, Attempt: 1, MaxRetries: -1, Reprocessable: true, CreatedAt: now, RunAt: now,
			AttemptedAt: &now, FinishedAt: &now, LastDuration: store.Duration(3 * time.Millisecond), History: []store.Event{}}
		if i%2 == 1 {
			j.State, j.Attempt, j.RetryCount = store.Dead, 4, 3
			j.LastError, j.LastErrorClass, j.LastFailedAt, j.DeadAt = "http status 503 Service Unavailable", failure.Transient, &now, &now
			j.DeadReason, j.Fingerprint = "retries_exhausted", "0123456789abcdef"
			for a := 1; a <= 4; a++ {
				j.History = append(j.History, store.Event{Kind: store.EventRetry, Attempt: a, At: now, Duration: store.Duration(time.Millisecond),
					Class: "transient", Error: "http status 503 Service Unavailable", Reason: "http_503", Delay: store.Duration(time.Second), Worker: "w1"})
			}
		}
		jobs[i] = j
	}
	enc := json.NewEncoder(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		if err := enc.Encode(jobs); err != nil {
			b.Fatal(err)
		}
	}
}
