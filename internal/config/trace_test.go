package config

import (
	"strings"
	"testing"
)

// TestTraceURLTemplate: a viewer's URL template is kept, from the flag or
// REDRIVE_TRACE_URL_TEMPLATE; a bad one is refused at load, naming the
// setting and saying why.
func TestTraceURLTemplate(t *testing.T) {
	const tmpl = "http://jaeger:16686/trace/{trace_id}"
	cfg, err := loadConfig(t, nil, "--trace-url-template", tmpl)
	if err != nil || cfg.TraceURLTemplate != tmpl {
		t.Fatalf("--trace-url-template %q: %+v, %v", tmpl, cfg, err)
	}
	cfg, err = loadConfig(t, map[string]string{"REDRIVE_TRACE_URL_TEMPLATE": tmpl})
	if err != nil || cfg.TraceURLTemplate != tmpl {
		t.Fatalf("REDRIVE_TRACE_URL_TEMPLATE: %v", err)
	}
	if cfg, err := loadConfig(t, nil); err != nil || cfg.TraceURLTemplate != "" {
		t.Fatalf("no template: %q, %v", cfg.TraceURLTemplate, err)
	}
	for bad, why := range map[string]string{
		"http://jaeger:16686/trace/":         "lacks {trace_id}",
		"javascript:alert({trace_id})":       "not an http or https URL",
		"http://jaeger/{trace_id}/{span_id}": "brace",
		"jaeger:16686/trace/{trace_id}":      "not an http or https URL",
	} {
		_, err := loadConfig(t, nil, "--trace-url-template", bad)
		if err == nil || !strings.Contains(err.Error(), "trace-url-template") || !strings.Contains(err.Error(), why) {
			t.Errorf("--trace-url-template %q: %v, want an error naming the setting and saying %q", bad, err, why)
		}
	}
}
