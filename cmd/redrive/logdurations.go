package main

import (
	"context"
	"log/slog"
)

// durationText wraps a log handler so that time.Duration attributes are
// written as text with their unit ("1.08s"), as the text handler writes
// them, instead of the JSON handler's bare nanoseconds ("delay":
// 1080000000). The engine's packages log durations as slog durations
// (retry delays, timeouts); serve's logs carry their units in either
// format.
func durationText(h slog.Handler) slog.Handler { return durationHandler{h} }

type durationHandler struct{ slog.Handler }

// Handle rewrites the record's duration attributes, in groups too.
func (h durationHandler) Handle(ctx context.Context, r slog.Record) error {
	has := false
	r.Attrs(func(a slog.Attr) bool {
		has = hasDuration(a)
		return !has
	})
	if !has {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(textDurations(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// WithAttrs rewrites the duration attributes given once for every record.
func (h durationHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = textDurations(a)
	}
	return durationHandler{h.Handler.WithAttrs(out)}
}

// WithGroup keeps the wrapping.
func (h durationHandler) WithGroup(name string) slog.Handler {
	return durationHandler{h.Handler.WithGroup(name)}
}

// hasDuration reports whether a is, or its group holds, a duration.
func hasDuration(a slog.Attr) bool {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return true
	case slog.KindGroup:
		for _, g := range v.Group() {
			if hasDuration(g) {
				return true
			}
		}
	}
	return false
}

// textDurations returns a with its durations, in groups too, as text.
func textDurations(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, v.Duration().String())
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, x := range g {
			out[i] = textDurations(x)
		}
		return slog.Group(a.Key, out...)
	}
	return slog.Attr{Key: a.Key, Value: v}
}
