package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// exportSettings are the settings of folder exports through the API.
var exportSettings = []setting{
	{name: "export-dir", help: "directory under which POST /v1/dlq/export may write dead jobs' folders (on this machine: serve's worker runs the exports); empty: the API refuses folder exports (403 export_disabled)", apply: func(c *Serve, v string) error {
		if v != "" && strings.TrimSpace(v) == "" {
			return errors.New("a path of white space only")
		}
		if strings.ContainsRune(v, 0) {
			return errors.New("the path contains a NUL byte")
		}
		if v != "" {
			abs, err := filepath.Abs(v)
			if err != nil {
				return fmt.Errorf("%q: %w", v, err)
			}
			v = abs
		}
		c.ExportDir = v
		return nil
	}},
}
