package main

import (
	"io"
	"log/slog"

	"github.com/redrivehq/redrive/internal/config"
)

// logFormatEnv is the environment variable of --log-format, for the
// commands that log besides serve (serve reads it as a setting).
const logFormatEnv = "REDRIVE_LOG_FORMAT"

// newLogHandler returns the handler of logs written to w in format; auto
// is text when w is a terminal, json otherwise (a file, a pipe, a log
// collector).
func newLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogFormatText || format == config.LogFormatAuto && stderrIsTerminal(w) {
		return slog.NewTextHandler(w, opts)
	}
	return slog.NewJSONHandler(w, opts)
}
