package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// fuzzHandler returns the API on a fresh SQLite store, with a small body
// bound so that the oversized path is reached too.
func fuzzHandler(f *testing.F) http.Handler {
	st := openStore(f)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	s := New(Options{Client: c, Logger: quiet, MaxBody: 64 << 10})
	f.Cleanup(func() { _ = s.Close() }) // before the store closes
	return s
}

// fuzzPost posts body to path and checks the answer: never a 5xx, and a
// 4xx always carries the JSON error shape. A redrive answers 202: an
// operation started (or 429 once too many run). It returns the answer.
func fuzzPost(t *testing.T, h http.Handler, path string, body []byte, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); h.ServeHTTP(rec, req) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("request still running after 5s for body %q\n%s", body, buf)
	}
	switch {
	case rec.Code >= 500:
		t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body.Bytes())
	case rec.Code >= 400:
		checkErrorShape(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
	case rec.Code != 200 && rec.Code != 201 && rec.Code != 202:
		t.Fatalf("unexpected status %d for body %q: %s", rec.Code, body, rec.Body.Bytes())
	}
	return rec
}

func FuzzEnqueueBody(f *testing.F) {
	for _, s := range []string{
		`{"kind":"email","payload":{"to":"a@example.com"}}`,
		`{"kind":"k","queue":"q","delay":"10s","max_retries":3,"idempotency_key":"x","dependency":"d","not_reprocessable":true}`,
		`{"kind":"k","run_at":"2030-01-02T15:04:05Z","payload":[1,"two",null,{"a":1.5e300}]}`,
		`{"kind":"k","colour":"red"}`,
		`{"kind":1}`,
		`{"kind":`,
		`[]`,
		`null`,
		``,
		`{"kind":"k"} trailing`,
		`{"kind":"a\u0000b","payload":"\ud800"}`,
		`{"kind":"k","delay":"-1h","max_retries":-5}`,
		`{"kind":"k","max_retries":1e30}`,
		`{"jobs":[{"kind":"a"}]}`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"kind":"k"}`), "key-1")
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		var headers []string
		if key != "" && isHeaderValue(key) {
			headers = []string{"Idempotency-Key", key}
		}
		fuzzPost(t, h, "/v1/jobs", body, headers...)
		fuzzPost(t, h, "/v1/jobs/batch", body)
	})
}

func FuzzRedriveBody(f *testing.F) {
	for _, s := range []string{
		`{"ids":[1,2,3]}`,
		`{"ids":[1],"payload":{"fixed":true},"note":"ops"}`,
		`{"filter":{"queue":"q","kind":"k","class":"permanent","reason":"r","since":"2026-01-01T00:00:00Z","until":"2027-01-01T00:00:00Z","q":"timeout"},"rate":10}`,
		`{"filter":{}}`,
		`{"filter":{"since":"7d","until":"1h"}}`, `{"filter":{"since":"1h","until":"7d"}}`, `{"filter":{"until":"-1h"}}`,
		`{"all":true,"rate":0.1}`,
		`{"ids":[1,2],"rate":0.1}`,
		`{"ids":[-1]}`,
		`{"ids":"1"}`,
		`{"filter":{"colour":"red"}}`,
		`{"ids":[1],"filter":{"queue":"q"}}`,
		`{"ids":[1],"rate":1e400}`,
		`{`,
		``,
	} {
		f.Add([]byte(s))
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzPost(t, h, "/v1/dlq/redrive", body)
	})
}

// isHeaderValue reports whether s can be sent as a header value.
func isHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
