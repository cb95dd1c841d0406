package rhttp_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/rhttp"
)

// BenchmarkRoundTripSuccess measures what a Transport adds to a request that
// succeeds at once: "base" is http.DefaultTransport alone, "rhttp" the same
// wrapped in a Transport, "rhttp+breaker" with a breaker per host as well.
func BenchmarkRoundTripSuccess(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	run := func(b *testing.B, rt http.RoundTripper) {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	b.Run("base", func(b *testing.B) { run(b, http.DefaultTransport) })
	b.Run("rhttp", func(b *testing.B) {
		run(b, &rhttp.Transport{Base: http.DefaultTransport, Logger: quiet})
	})
	b.Run("rhttp+breaker", func(b *testing.B) {
		run(b, &rhttp.Transport{Base: http.DefaultTransport, Logger: quiet, Breakers: breaker.NewRegistry(breaker.Config{})})
	})
}

// BenchmarkTransportOverhead isolates the Transport's own cost from the
// network: Base answers 200 from memory.
func BenchmarkTransportOverhead(b *testing.B) {
	resp := &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	req, err := http.NewRequest(http.MethodGet, "http://api.example.com/v1/things", nil)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rt.RoundTrip(req); err != nil {
				b.Fatal(err)
			}
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	b.Run("base", func(b *testing.B) { run(b, base) })
	b.Run("rhttp", func(b *testing.B) { run(b, &rhttp.Transport{Base: base, Logger: quiet}) })
	b.Run("rhttp+breaker", func(b *testing.B) {
		run(b, &rhttp.Transport{Base: base, Logger: quiet, Breakers: breaker.NewRegistry(breaker.Config{})})
	})
}
