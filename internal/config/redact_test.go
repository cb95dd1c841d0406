package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/redact"
)

// TestRedactSettings: the names of secrets default to redact's lists,
// are set by flag, environment or config file, "none" turns them off,
// and a bad list is refused at load naming the setting.
func TestRedactSettings(t *testing.T) {
	cfg, err := loadConfig(t, nil)
	if err != nil || !slices.Equal(cfg.RedactHeaders, redact.DefaultHeaders) || !slices.Equal(cfg.RedactFields, redact.DefaultFields) {
		t.Fatalf("defaults: %q %q, %v", cfg.RedactHeaders, cfg.RedactFields, err)
	}
	if cfg.HTTPOptions().RedactHeaders == nil || cfg.DownloadOptions().RedactHeaders == nil {
		t.Fatal("the http and download kinds do not get the header patterns")
	}
	cfg, err = loadConfig(t, map[string]string{"REDRIVE_REDACT_FIELDS": "none"}, "--redact-headers", "X-Mine, *PIN*")
	if err != nil || !slices.Equal(cfg.RedactHeaders, []string{"x-mine", "*pin*"}) || cfg.RedactFields == nil || len(cfg.RedactFields) != 0 {
		t.Fatalf("set: %q %q, %v", cfg.RedactHeaders, cfg.RedactFields, err)
	}
	file := writeFile(t, "redrive.json", `{"redact-fields": "ssn,*card*"}`)
	cfg, err = loadConfig(t, map[string]string{"REDRIVE_CONFIG": file})
	if err != nil || !slices.Equal(cfg.RedactFields, []string{"ssn", "*card*"}) {
		t.Fatalf("config file: %q, %v", cfg.RedactFields, err)
	}
	for _, bad := range []string{"", "a,,b", "*"} {
		_, err := loadConfig(t, nil, "--redact-headers", bad)
		if err == nil || !strings.Contains(err.Error(), "redact-headers") {
			t.Errorf("--redact-headers %q: %v", bad, err)
		}
	}
}
