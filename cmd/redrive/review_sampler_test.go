package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
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
