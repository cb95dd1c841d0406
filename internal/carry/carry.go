// Package carry is what the broker transports share about the state a
// message carries in its headers from one attempt to the next: its
// bounded attempt history and its due time.
package carry

import (
	"encoding/json"
	"time"

	"github.com/redrivehq/redrive/store"
)

// History encodes events as the JSON array a message carries, dropping
// the oldest (and counting them in dropped) until at most max events and
// maxBytes bytes remain.
func History(events []store.Event, dropped, max, maxBytes int) (string, int) {
	if len(events) > max {
		dropped += len(events) - max
		events = events[len(events)-max:]
	}
	for {
		b, err := json.Marshal(events)
		if err != nil {
			return "[]", dropped + len(events)
		}
		if len(b) <= maxBytes || len(events) == 0 {
			return string(b), dropped
		}
		events = events[1:]
		dropped++
	}
}

// CeilMilli is t in Unix milliseconds, rounded up: a due time carried in
// milliseconds never moves earlier.
func CeilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}
