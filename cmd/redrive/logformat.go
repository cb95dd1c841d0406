package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Log formats of --log-format.
const (
	LogFormatAuto = "auto"
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// logFormatEnv is the environment variable of --log-format, for the
// commands that log besides serve (serve reads it as a setting).
const logFormatEnv = "REDRIVE_LOG_FORMAT"

// ParseLogFormat parses a --log-format value: text, json or auto ("" is
// auto).
func ParseLogFormat(v string) (string, error) {
	switch f := strings.ToLower(strings.TrimSpace(v)); f {
	case "", LogFormatAuto:
		return LogFormatAuto, nil
	case LogFormatText, LogFormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("%q: want text, json or auto", v)
}

// newLogHandler returns the handler of logs written to w in format; auto
// is text when w is a terminal, json otherwise (a file, a pipe, a log
// collector).
func newLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogFormatText || format == LogFormatAuto && stderrIsTerminal(w) {
		return slog.NewTextHandler(w, opts)
	}
	return slog.NewJSONHandler(w, opts)
}
