package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/internal/httpreq"
)

// serveTracing returns the tracer provider serve's engine traces with, and
// how to flush and stop it, when the standard OpenTelemetry environment
// asks for an export: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, and OTEL_TRACES_EXPORTER unset
// or "otlp" ("none" turns it off). The exporter sends OTLP over HTTP with
// protobuf, configured by the OTEL_EXPORTER_OTLP_* variables; the sampler
// is OTEL_TRACES_SAMPLER's (default parentbased_always_on); the service
// is OTEL_SERVICE_NAME (default "redrive"), with OTEL_RESOURCE_ATTRIBUTES.
// Without those variables it returns a nil provider: no tracing.
func serveTracing(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "none":
		return nil, none, nil
	case "", "otlp":
	default:
		return nil, none, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: serve exports traces by OTLP only (otlp, or none)", exporter)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "http/protobuf" {
			return nil, none, fmt.Errorf("%s=%q: serve sends OTLP over HTTP with protobuf only (http/protobuf)", v, p)
		}
	}
	if err := checkSampler(); err != nil {
		return nil, none, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, none, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, none, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" && !hasServiceName() {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String(serviceName, "redrive")))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing: exporting spans by OTLP/HTTP", "endpoint", loggedEndpoint(firstSet("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")))
	return tp, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush the last spans: %w", err)
		}
		return nil
	}, nil
}

// serviceName is the resource attribute naming the service.
const serviceName = "service.name"

// hasServiceName reports whether OTEL_RESOURCE_ATTRIBUTES names the
// service.
func hasServiceName() bool {
	for kv := range strings.SplitSeq(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == serviceName {
			return true
		}
	}
	return false
}

// loggedEndpoint returns the OTLP endpoint e as a log line shows it:
// without user information, query or fragment (a collector's password, a
// token), and "(not a URL)" when it does not parse.
func loggedEndpoint(e string) string {
	u, err := url.Parse(e)
	if err != nil {
		return "(not a URL)"
	}
	return httpreq.Redact(u)
}

// firstSet returns the value of the first of the variables that is set.
func firstSet(vars ...string) string {
	for _, v := range vars {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return ""
}

// checkSampler returns why OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// do not name a sampler the SDK honours, nil when they do (or are unset).
// The SDK itself would report the error to OpenTelemetry's global handler
// and fall back (to the default sampler, or to a ratio of 1); serve
// refuses to start instead, as for the protocol.
func checkSampler() error {
	sampler := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
	default:
		return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, "+
			"parentbased_always_off or parentbased_traceidratio", os.Getenv("OTEL_TRACES_SAMPLER"))
	}
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	if arg == "" {
		return nil // a ratio of 1
	}
	if r, err := strconv.ParseFloat(arg, 64); err != nil || math.IsNaN(r) || r < 0 || r > 1 {
		return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want the ratio of traces %s samples, from 0 to 1 (e.g. 0.01)", arg, sampler)
	}
	return nil
}
