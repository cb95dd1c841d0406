package config

import (
	"fmt"

	"github.com/redrivehq/redrive/internal/tracectx"
)

// traceSettings are the settings of tracing beyond the OTEL_* variables.
var traceSettings = []setting{
	{name: "trace-url-template", help: "URL of a trace in a trace viewer, with {trace_id} where the trace id goes " +
		"(e.g. http://jaeger:16686/trace/{trace_id}): the dashboard's job page links the job's trace id to it; empty: no link", apply: func(c *Serve, v string) error {
		if v != "" {
			if err := tracectx.CheckURLTemplate(v); err != nil {
				return fmt.Errorf("want an http or https URL with {trace_id} where the trace id goes: %w", err)
			}
		}
		c.TraceURLTemplate = v
		return nil
	}},
}
