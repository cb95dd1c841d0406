// Command apiload measures the enqueue throughput of a running
// `redrive serve` over its REST API: it keeps -concurrency connections
// busy with POST /v1/jobs (or POST /v1/jobs/batch with -batch jobs per
// request) for -duration, then reports requests/s, jobs/s and the latency
// percentiles of the requests.
//
//	go run ./bench/apiload -url http://127.0.0.1:18080 -concurrency 16 -duration 10s
//	go run ./bench/apiload -url http://127.0.0.1:18080 -concurrency 4 -batch 100
//
// It only talks to loopback addresses.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

func run() error {
	base := flag.String("url", "http://127.0.0.1:18080", "base URL of `redrive serve` (loopback only)")
	conc := flag.Int("concurrency", 16, "concurrent connections, each with one request in flight")
	dur := flag.Duration("duration", 10*time.Second, "how long to send requests")
	batch := flag.Int("batch", 0, "0: POST /v1/jobs, one job a request; N: POST /v1/jobs/batch with N jobs a request")
	token := flag.String("token", "", "bearer token of the API")
	queue := flag.String("queue", "load", "queue of the jobs (use one no worker serves)")
	kind := flag.String("kind", "noop", "kind of the jobs")
	flag.Parse()

	u, err := url.Parse(*base)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if err := checkLoopback(u); err != nil {
		return err
	}
	switch {
	case *conc < 1 || *conc > 1024:
		return errors.New("-concurrency: want 1 to 1024")
	case *dur <= 0 || *dur > 10*time.Minute:
		return errors.New("-duration: want more than 0 and at most 10m")
	case *batch < 0 || *batch > 1000:
		return errors.New("-batch: want 0 to 1000")
	}

	job := fmt.Sprintf(`{"kind":%q,"queue":%q,"payload":{"n":1}}`, *kind, *queue)
	path, body, jobsPerReq := "/v1/jobs", []byte(job), 1
	if *batch > 0 {
		path, jobsPerReq = "/v1/jobs/batch", *batch
		body = []byte(`{"jobs":[` + strings.TrimSuffix(strings.Repeat(job+",", *batch), ",") + `]}`)
	}
	target := strings.TrimSuffix(u.String(), "/") + path

	client := &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        *conc,
			MaxIdleConnsPerHost: *conc,
			MaxConnsPerHost:     *conc,
			IdleConnTimeout:     time.Minute,
		},
		Timeout: 30 * time.Second,
	}

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	type result struct {
		lat      []time.Duration
		errs     int
		firstErr error
	}
	results := make([]result, *conc)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *conc {
		wg.Go(func() {
			r := &results[i]
			for ctx.Err() == nil {
				t0 := time.Now()
				err := post(ctx, client, target, *token, body)
				if ctx.Err() != nil {
					return // cut by the end of the run: not counted
				}
				if err != nil {
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var lat []time.Duration
	errs := 0
	var firstErr error
	for _, r := range results {
		lat = append(lat, r.lat...)
		errs += r.errs
		if firstErr == nil {
			firstErr = r.firstErr
		}
	}
	slices.Sort(lat)
	n := len(lat)
	secs := elapsed.Seconds()
	mode := "POST /v1/jobs"
	if *batch > 0 {
		mode = fmt.Sprintf("POST /v1/jobs/batch (%d jobs/request)", *batch)
	}
	fmt.Printf("%s  concurrency=%d  duration=%s\n", mode, *conc, elapsed.Round(time.Millisecond))
	fmt.Printf("requests: %d ok, %d errors\n", n, errs)
	if firstErr != nil {
		fmt.Printf("first error: %v\n", firstErr)
	}
	fmt.Printf("requests/s: %.0f\n", float64(n)/secs)
	fmt.Printf("jobs/s: %.0f\n", float64(n*jobsPerReq)/secs)
	if n > 0 {
		fmt.Printf("latency: p50 %s  p99 %s  max %s\n", pct(lat, 0.50), pct(lat, 0.99), lat[n-1].Round(time.Microsecond))
	}
	if n == 0 {
		return errors.New("no request succeeded")
	}
	return nil
}

// post sends one enqueue request and drains the answer; anything but 201
// is an error.
func post(ctx context.Context, c *http.Client, target, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}

// pct is the q-quantile of sorted latencies (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Microsecond)
}

// checkLoopback refuses any target but a loopback address.
func checkLoopback(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("-url %s: want http:// or https://", u)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-url %s: only loopback addresses are allowed", u)
	}
	return nil
}
