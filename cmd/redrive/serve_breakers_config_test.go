package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServeBreakerAndClassifyWiring runs serve with a dependency mapped to
// the target's host and a queue's status override: the http jobs to that
// host go through the dependency's breaker, which trips at its own
// threshold, and the override decides the class of a 404 on that queue.
func TestServeBreakerAndClassifyWiring(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "down", http.StatusBadGateway)
	}))
	defer target.Close()
	u, _ := url.Parse(target.URL)
	deps := fmt.Sprintf(`{"payments":{"hosts":[%q],"failures":2,"open_for":"1h"}}`, u.Host)
	base, logs := startServe(t, "--queues", "default=1,lookups=1", "--breaker-dependencies", deps,
		"--config", writeFile(t, "redrive.json", `{"queues":{"default":1,"lookups":{"classify":{"status":{"404":"transient"}}}}}`))

	enqueue := func(queue, path string) int64 {
		t.Helper()
		body := fmt.Sprintf(`{"kind":"http","queue":%q,"max_retries":0,"payload":{"url":%q}}`, queue, target.URL+path)
		code, b := call(t, "POST", base+"/v1/jobs", "", body)
		if code != http.StatusCreated {
			t.Fatalf("POST /v1/jobs: %d %s", code, b)
		}
		var j struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	type jobView struct {
		State   string `json:"state"`
		History []struct {
			Kind   string `json:"kind"`
			Class  string `json:"class"`
			Reason string `json:"reason"`
		} `json:"history"`
	}
	waitFor := func(id int64, done func(jobView) bool) jobView {
		t.Helper()
		var j jobView
		waitUntil(t, e2eWait, fmt.Sprintf("job %d got where the test expects", id), func() error {
			code, b := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "", "")
			j = jobView{}
			if code == http.StatusOK && json.Unmarshal(b, &j) == nil && done(j) {
				return nil
			}
			return fmt.Errorf("%s\nlogs:\n%s", b, logs)
		})
		return j
	}

	// A 404 on the lookups queue is transient (retried, here exhausted at
	// once); on the default queue it is permanent.
	j := waitFor(enqueue("lookups", "/missing"), func(j jobView) bool { return j.State == "dead" })
	if j.History[0].Class != "transient" {
		t.Fatalf("lookups: 404 classified %+v, want transient", j.History[0])
	}
	j = waitFor(enqueue("default", "/missing"), func(j jobView) bool { return j.State == "dead" })
	if j.History[0].Class != "permanent" {
		t.Fatalf("default: 404 classified %+v, want permanent", j.History[0])
	}

	// Two 502s trip the payments breaker (failures 2, and 2 of the 4 calls
	// so far); the third job is deferred without calling the host.
	for range 2 {
		waitFor(enqueue("default", "/charge"), func(j jobView) bool { return j.State == "dead" })
	}
	before := hits.Load()
	j = waitFor(enqueue("default", "/charge"), func(j jobView) bool { return len(j.History) > 0 })
	if j.History[0].Kind != "deferred" || j.History[0].Reason != "breaker_open:payments" {
		t.Fatalf("third job: %+v, want deferred by the payments breaker", j.History)
	}
	if hits.Load() != before {
		t.Fatalf("the host was called through an open breaker")
	}
	code, b := call(t, "GET", base+"/v1/breakers", "", "")
	if code != http.StatusOK || !strings.Contains(string(b), `"payments"`) {
		t.Fatalf("GET /v1/breakers: %d %s", code, b)
	}
}
