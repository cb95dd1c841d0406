package redrivetest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// Match narrows the jobs RequireEnqueued, RequireNotEnqueued and Enqueued
// look at. A nil *Match, like the zero Match, matches every job of the
// kind.
type Match struct {
	// Payload, when not nil, must be contained in the job's payload. It
	// is encoded as Enqueue encodes payloads (a struct, a map, a
	// json.RawMessage); then every key of an object in it must be in
	// the job's object with a matching value, recursively, and arrays
	// and other values must be equal (numbers compare by value). So
	// map[string]any{"to": "a@example.com"} matches a job whose payload
	// has that "to" and any other fields.
	Payload any
	// Queue, when not "", is the job's queue.
	Queue string
	// States, when not empty, are the states the job may be in. Empty
	// means any state: a job a worker already ran was still enqueued.
	States []redrive.State
	// Func, when not nil, must return true for the job.
	Func func(*redrive.Job) bool
}

// maxShown bounds how many non-matching jobs a failure message lists.
const maxShown = 10

// RequireEnqueued fails t unless the store of client holds a job of kind
// that m matches, and returns the matching jobs, oldest first. The
// failure message lists the jobs of the kind that did not match.
func RequireEnqueued(t testing.TB, client *redrive.Client, kind string, m *Match) []*redrive.Job {
	t.Helper()
	matched, others := find(t, client, kind, m)
	if len(matched) == 0 {
		t.Fatalf("redrivetest: no job of kind %q matching %s was enqueued%s", kind, m.describe(), list(kind, others))
		return nil
	}
	return matched
}

// RequireNotEnqueued fails t if the store of client holds a job of kind
// that m matches; the failure message lists those jobs.
func RequireNotEnqueued(t testing.TB, client *redrive.Client, kind string, m *Match) {
	t.Helper()
	matched, _ := find(t, client, kind, m)
	if len(matched) > 0 {
		t.Fatalf("redrivetest: %d job(s) of kind %q matching %s were enqueued, want none:%s",
			len(matched), kind, m.describe(), show(matched))
	}
}

// Enqueued returns the jobs of kind in the store of client that m
// matches, oldest first, for assertions RequireEnqueued does not make (a
// count, an order). An error reading the store fails t.
func Enqueued(t testing.TB, client *redrive.Client, kind string, m *Match) []*redrive.Job {
	t.Helper()
	matched, _ := find(t, client, kind, m)
	return matched
}

// find lists the jobs of kind that m matches, and those it does not.
func find(t testing.TB, client *redrive.Client, kind string, m *Match) (matched, others []*redrive.Job) {
	t.Helper()
	if m == nil {
		m = &Match{}
	}
	var want any
	if m.Payload != nil {
		b, err := redrive.EncodePayload(m.Payload)
		if err != nil {
			t.Fatalf("redrivetest: match payload: %v", err)
			return nil, nil
		}
		if want, err = decode(b); err != nil {
			t.Fatalf("redrivetest: match payload: %v", err)
			return nil, nil
		}
	}
	f := store.Filter{Kind: kind, Queue: m.Queue, States: m.States}
	page := store.Page{Limit: store.MaxPageSize}
	for {
		res, err := client.List(contextOf(t), f, page)
		if err != nil {
			t.Fatalf("redrivetest: list jobs of kind %q: %v", kind, err)
			return nil, nil
		}
		for _, j := range res.Jobs {
			if m.matches(j, want) {
				matched = append(matched, j)
			} else {
				others = append(others, j)
			}
		}
		if res.Next == "" {
			break
		}
		page.Cursor = res.Next
	}
	sortByID(matched)
	sortByID(others)
	return matched, others
}

// matches reports whether j, of the listed kind, queue and states,
// matches m's payload (decoded as want) and function.
func (m *Match) matches(j *redrive.Job, want any) bool {
	if m.Payload != nil {
		got, err := decode(j.Payload)
		if err != nil || !contains(want, got) {
			return false
		}
	}
	return m.Func == nil || m.Func(j)
}

// describe tells what m asks for, in a failure message.
func (m *Match) describe() string {
	if m == nil {
		return "anything"
	}
	var parts []string
	if m.Payload != nil {
		b, _ := redrive.EncodePayload(m.Payload)
		parts = append(parts, "payload "+string(b))
	}
	if m.Queue != "" {
		parts = append(parts, "queue "+m.Queue)
	}
	if len(m.States) > 0 {
		parts = append(parts, fmt.Sprintf("states %v", m.States))
	}
	if m.Func != nil {
		parts = append(parts, "the match function")
	}
	if len(parts) == 0 {
		return "anything"
	}
	return strings.Join(parts, ", ")
}

// list describes the jobs of kind that did not match.
func list(kind string, others []*redrive.Job) string {
	if len(others) == 0 {
		return fmt.Sprintf("; there is no job of kind %q", kind)
	}
	return fmt.Sprintf("; %d job(s) of kind %q did not match:%s", len(others), kind, show(others))
}

// show lists jobs, one a line, at most maxShown of them.
func show(js []*redrive.Job) string {
	var b strings.Builder
	for i, j := range js {
		if i == maxShown {
			fmt.Fprintf(&b, "\n\t... and %d more", len(js)-maxShown)
			break
		}
		fmt.Fprintf(&b, "\n\tjob %d queue %s state %s payload %s", j.ID, j.Queue, j.State, j.Payload)
	}
	return b.String()
}

// decode decodes JSON keeping numbers exact.
func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return v, nil
}

// contains reports whether want is contained in got (see Match.Payload).
func contains(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !contains(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !equal(w[i], g[i]) {
				return false
			}
		}
		return true
	default:
		return equal(want, got)
	}
}

// equal reports whether two decoded JSON values are equal, numbers by
// value.
func equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		// Exactly, as rationals: a float of any fixed precision rounds
		// long numbers (2^64+1 to 2^64). Numbers too large to parse so
		// (exponents beyond a million) compare as written.
		rx, okx := new(big.Rat).SetString(x.String())
		ry, oky := new(big.Rat).SetString(y.String())
		if !okx || !oky {
			return x == y
		}
		return rx.Cmp(ry) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		return contains(x, y)
	case []any:
		return contains(x, b)
	default:
		return a == b
	}
}

// sortByID sorts jobs oldest first.
func sortByID(js []*redrive.Job) {
	slices.SortFunc(js, func(a, b *redrive.Job) int { return cmp.Compare(a.ID, b.ID) })
}
