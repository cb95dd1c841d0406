package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestServeTracingSampler: serve refuses at start an OTEL_TRACES_SAMPLER
// it cannot honour, or a sampler argument that is not a ratio from 0 to
// 1, naming the variable, instead of the SDK's silent fallback (a
// mistyped ratio sampled every trace); the valid ones start.
func TestServeTracingSampler(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		sampler, arg string
		ok           bool
	}{
		{"", "", true},
		{"always_on", "", true},
		{"ALWAYS_OFF", "", true},
		{"parentbased_always_on", "", true},
		{"parentbased_always_off", "", true},
		{"traceidratio", "0.01", true},
		{"traceidratio", "", true},
		{"parentbased_traceidratio", " 1 ", true},
		{"alwayson", "", false},
		{"jaeger_remote", "", false},
		{"traceidratio", "1%", false},
		{"traceidratio", "0.01x", false},
		{"parentbased_traceidratio", "2", false},
		{"parentbased_traceidratio", "-0.5", false},
		{"parentbased_traceidratio", "NaN", false},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		tp, stop, err := serveTracing(context.Background(), quiet)
		if (err == nil) != c.ok {
			t.Errorf("OTEL_TRACES_SAMPLER=%q OTEL_TRACES_SAMPLER_ARG=%q: error %v, want ok %v", c.sampler, c.arg, err, c.ok)
		}
		if err == nil {
			if tp == nil {
				t.Errorf("OTEL_TRACES_SAMPLER=%q: no tracer provider", c.sampler)
			}
			_ = stop(context.Background())
		}
	}
}

// FuzzCheckSampler: checkSampler never panics, and refuses what the SDK
// would report as an error (and fall back from), plus a NaN ratio.
func FuzzCheckSampler(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"traceidratio", "0.5"}, {"parentbased_traceidratio", "x"}, {" Always_On ", ""}, {"traceidratio", "1e-3"}} {
		f.Add(s[0], s[1])
	}
	var (
		mu      sync.Mutex
		handled []error
	)
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { mu.Lock(); defer mu.Unlock(); handled = append(handled, err) }))
	f.Cleanup(func() { otel.SetErrorHandler(prev) })
	f.Fuzz(func(t *testing.T, sampler, arg string) {
		if strings.ContainsRune(sampler+arg, 0) {
			return // not an environment variable's value
		}
		t.Setenv("OTEL_TRACES_SAMPLER", sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", arg)
		mu.Lock()
		handled = handled[:0]
		mu.Unlock()
		err := checkSampler()
		_ = sdktrace.NewTracerProvider().Shutdown(context.Background())
		mu.Lock()
		defer mu.Unlock()
		if err == nil && len(handled) > 0 {
			t.Fatalf("%q %q: accepted, but the SDK reports %v", sampler, arg, handled)
		}
		if err != nil && len(handled) == 0 && !strings.Contains(err.Error(), "NaN") && !strings.Contains(strings.ToLower(arg), "nan") {
			t.Fatalf("%q %q: refused (%v), but the SDK takes it", sampler, arg, err)
		}
	})
}
