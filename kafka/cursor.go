package kafka

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// cursorPrefix starts a redrive cursor's metadata: the settled offset
// ranges above its committed offset.
const cursorPrefix = "redrive.v1:"

// maxCursorRanges bounds the settled ranges a cursor remembers above its
// offset, so that its metadata stays well under the broker's
// offset.metadata.max.bytes (4096 by default).
const maxCursorRanges = 100

// errCursorFull is returned when a filtered redrive would leave more
// settled ranges between pending dead letters than a cursor remembers.
var errCursorFull = errors.New("the dead letters the filters skip are too scattered for the redrive cursor to remember " +
	"what was redriven between them")

// offRange is the offsets [from, to).
type offRange struct{ from, to int64 }

// cursor is how far the redrives of one DLT partition went: every offset
// below at is settled (redriven, discarded, or no dead letter: a
// transaction marker, an aborted record), and so are the offsets of done
// above it (sorted, disjoint, not adjacent, each after at). A dead letter
// a filtered redrive skips stays pending: at stops before it, and what
// was settled after it is remembered in done, in the committed offset's
// metadata.
type cursor struct {
	at   int64
	done []offRange
}

// settled reports whether offset o is settled.
func (c *cursor) settled(o int64) bool {
	if o < c.at {
		return true
	}
	for _, r := range c.done {
		if o < r.from {
			return false
		}
		if o < r.to {
			return true
		}
	}
	return false
}

// settle marks [from, to) settled.
func (c *cursor) settle(from, to int64) {
	if to <= from || to <= c.at {
		return
	}
	from = max(from, c.at)
	var out []offRange
	added := false
	for _, r := range c.done {
		switch {
		case r.to < from:
			out = append(out, r)
		case to < r.from:
			if !added {
				out = append(out, offRange{from, to})
				added = true
			}
			out = append(out, r)
		default: // overlapping or adjacent: merged into [from, to)
			from, to = min(from, r.from), max(to, r.to)
		}
	}
	if !added {
		out = append(out, offRange{from, to})
	}
	// The ranges that reach the cursor's offset move it.
	for len(out) > 0 && out[0].from <= c.at {
		c.at = max(c.at, out[0].to)
		out = out[1:]
	}
	c.done = out
}

// metadata encodes done for the committed offset's metadata.
func (c *cursor) metadata() string {
	if len(c.done) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(cursorPrefix)
	for i, r := range c.done {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(r.from, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(r.to, 10))
	}
	return b.String()
}

// parseCursor returns the cursor of committed offset at with metadata
// md. Metadata that is not a cursor's (empty, or written by something
// else) means nothing is settled above at; a cursor's metadata that
// cannot be read is an error.
func parseCursor(at int64, md string) (cursor, error) {
	c := cursor{at: at}
	rest, ok := strings.CutPrefix(md, cursorPrefix)
	if !ok || rest == "" {
		return c, nil
	}
	parts := strings.Split(rest, ",")
	if len(parts) > maxCursorRanges {
		return cursor{}, fmt.Errorf("redrive cursor metadata: %d ranges, at most %d", len(parts), maxCursorRanges)
	}
	last := at
	for _, p := range parts {
		f, t, ok := strings.Cut(p, "-")
		if !ok {
			return cursor{}, fmt.Errorf("redrive cursor metadata: range %q: want FROM-TO", p)
		}
		from, err1 := strconv.ParseInt(f, 10, 64)
		to, err2 := strconv.ParseInt(t, 10, 64)
		if err1 != nil || err2 != nil || from <= last || to <= from {
			return cursor{}, fmt.Errorf("redrive cursor metadata: range %q: want ascending, disjoint ranges after offset %d", p, at)
		}
		c.done = append(c.done, offRange{from, to})
		last = to
	}
	return c, nil
}
