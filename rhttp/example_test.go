package rhttp_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/rhttp"
)

func ExampleTransport() {
	// A server that is unavailable for its first two requests.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "hello")
	}))
	defer srv.Close()

	client := rhttp.NewClient(&rhttp.Transport{
		// Short delays without jitter keep the example quick and its output
		// stable; leave Policy nil for the default (1s, 2s, 4s).
		Policy: &retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second},
		Logger: slog.New(slog.DiscardHandler),
		OnRetry: func(ri rhttp.RetryInfo) {
			fmt.Printf("attempt %d failed (%s, %s); retrying in %v\n", ri.Attempt, ri.Class, ri.Reason, ri.Delay)
		},
	})

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.Status, ": ", string(body))
	// Output:
	// attempt 1 failed (transient, http_503); retrying in 10ms
	// attempt 2 failed (transient, http_503); retrying in 20ms
	// 200 OK: hello
}
