package main

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
)

// deadlineRecorder records, for the requests to one host, whether their
// context had a deadline.
type deadlineRecorder struct {
	next http.RoundTripper
	host string

	mu        sync.Mutex
	deadlines []bool
}

func (d *deadlineRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == d.host {
		_, ok := req.Context().Deadline()
		d.mu.Lock()
		d.deadlines = append(d.deadlines, ok)
		d.mu.Unlock()
	}
	return d.next.RoundTrip(req)
}

// TestRemoteRequestsUnbounded: over --server, a request is bounded by the
// command's context only (Ctrl-C), as it was before the CLI used
// apiclient and as it is on the store: not by apiclient's default
// per-request timeout, which would cut a count or a grouping that takes
// the server over a minute on a large store.
func TestRemoteRequestsUnbounded(t *testing.T) {
	ts, _, _ := newBareTestServer(t, "")
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	rec := &deadlineRecorder{next: http.DefaultTransport, host: u.Host}
	// The CLI's client sends with http.DefaultTransport; this test is not
	// parallel, so nothing else sends while it is swapped.
	http.DefaultTransport = rec
	t.Cleanup(func() { http.DefaultTransport = rec.next })
	for _, args := range [][]string{{"stats"}, {"dlq", "count"}, {"dlq", "groups"}} {
		var out, errOut bytes.Buffer
		// A context without a deadline, as the CLI's own (a signal's).
		if err := run(context.Background(), append(args, "--server", ts.URL), &out, &errOut); err != nil {
			t.Fatalf("%v: %v: %s", args, err, errOut.String())
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.deadlines) == 0 {
		t.Fatal("no request went through http.DefaultTransport")
	}
	for i, ok := range rec.deadlines {
		if ok {
			t.Errorf("request %d had a deadline the command did not set", i)
		}
	}
}
