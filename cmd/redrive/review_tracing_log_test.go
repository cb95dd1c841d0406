package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestServeTracingLogHidesEndpointSecrets: serve's line saying where it
// exports spans names the OTLP endpoint without the credentials or query
// OTEL_EXPORTER_OTLP_ENDPOINT may carry (a collector behind basic auth,
// a token in the query), as every URL serve logs.
func TestServeTracingLogHidesEndpointSecrets(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv("OTEL_TRACES_SAMPLER", "")
			t.Setenv(v, "http://user:s3cret@127.0.0.1:1/v1/traces?token=t0ken")
			var buf bytes.Buffer
			tp, stop, err := serveTracing(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)))
			if err != nil || tp == nil {
				t.Fatalf("serveTracing: %v, provider %v", err, tp)
			}
			_ = stop(context.Background())
			out := buf.String()
			if !strings.Contains(out, "127.0.0.1:1") {
				t.Fatalf("the endpoint is not logged: %s", out)
			}
			if strings.Contains(out, "s3cret") || strings.Contains(out, "t0ken") {
				t.Errorf("the endpoint's secrets are logged: %s", out)
			}
		})
	}
}
