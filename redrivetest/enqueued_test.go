package redrivetest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// newClient returns a client on an SQLite store in a temporary directory.
func newClient(t *testing.T) *redrive.Client {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
}

type order struct {
	ID    int      `json:"id"`
	Email string   `json:"email"`
	Items []string `json:"items"`
}

func TestRequireEnqueuedMatches(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	first, err := c.Enqueue(ctx, "receipt", order{ID: 1, Email: "a@example.com", Items: []string{"tea"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "receipt", order{ID: 2, Email: "b@example.com"}, redrive.InQueue("mail")); err != nil {
		t.Fatal(err)
	}
	if got := RequireEnqueued(t, c, "receipt", nil); len(got) != 2 || got[0].ID != first.ID {
		t.Fatalf("got %d jobs, want both, oldest first", len(got))
	}
	// A part of the payload, numbers by value.
	got := RequireEnqueued(t, c, "receipt", &Match{Payload: map[string]any{"id": 1.0}})
	if len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("payload match found %d jobs", len(got))
	}
	RequireEnqueued(t, c, "receipt", &Match{Payload: []byte(`{"items": ["tea"]}`)})
	RequireEnqueued(t, c, "receipt", &Match{Queue: "mail", States: []redrive.State{redrive.Pending}})
	RequireEnqueued(t, c, "receipt", &Match{Func: func(j *redrive.Job) bool { return j.Queue == "mail" }})
	RequireNotEnqueued(t, c, "receipt", &Match{Payload: order{ID: 1}}) // the whole struct: email "" differs
	RequireNotEnqueued(t, c, "receipt", &Match{Payload: map[string]any{"items": []string{"tea", "milk"}}})
	RequireNotEnqueued(t, c, "invoice", nil)
	if n := len(Enqueued(t, c, "receipt", &Match{Queue: "default"})); n != 1 {
		t.Fatalf("Enqueued found %d jobs in queue default, want 1", n)
	}
}

// RequireEnqueued fails the test when no job matches, and its message
// lists the jobs of the kind that did not.
func TestRequireEnqueuedFailsWithoutMatch(t *testing.T) {
	c := newClient(t)
	if _, err := c.Enqueue(t.Context(), "receipt", order{ID: 1}); err != nil {
		t.Fatal(err)
	}
	f := runFake(t, func(tb testing.TB) {
		RequireEnqueued(tb, c, "receipt", &Match{Payload: map[string]any{"id": 2}})
	})
	wantFailure(t, f, `no job of kind "receipt" matching payload {"id":2}`, `"id":1`)

	f = runFake(t, func(tb testing.TB) { RequireEnqueued(tb, c, "invoice", nil) })
	wantFailure(t, f, `there is no job of kind "invoice"`)

	f = runFake(t, func(tb testing.TB) {
		RequireEnqueued(tb, c, "receipt", &Match{States: []redrive.State{redrive.Dead}})
	})
	wantFailure(t, f, "states [dead]")
}

func TestRequireNotEnqueuedFailsOnMatch(t *testing.T) {
	c := newClient(t)
	for i := range 12 {
		if _, err := c.Enqueue(t.Context(), "receipt", order{ID: i}); err != nil {
			t.Fatal(err)
		}
	}
	f := runFake(t, func(tb testing.TB) { RequireNotEnqueued(tb, c, "receipt", nil) })
	wantFailure(t, f, `12 job(s) of kind "receipt" matching anything were enqueued`, "and 2 more")
}

func TestRequireEnqueuedFailsOnBadPayload(t *testing.T) {
	c := newClient(t)
	f := runFake(t, func(tb testing.TB) {
		RequireEnqueued(tb, c, "receipt", &Match{Payload: []byte(`{`)})
	})
	wantFailure(t, f, "match payload")
}

func TestContains(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{`{"a":1}`, `{"a":1.0,"b":2}`, true},
		{`{"a":{"b":1}}`, `{"a":{"b":1,"c":2}}`, true},
		{`{"a":[{"b":1}]}`, `{"a":[{"b":1,"c":2}]}`, false}, // arrays are equal or not
		{`{"a":[1,2]}`, `{"a":[1,2]}`, true},
		{`{"a":[1]}`, `{"a":[1,2]}`, false},
		{`{"a":null}`, `{}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`"x"`, `"x"`, true},
		{`{}`, `[]`, false},
	} {
		w, _ := decode([]byte(tc.want))
		g, _ := decode([]byte(tc.got))
		if contains(w, g) != tc.ok {
			t.Errorf("contains(%s, %s) = %v", tc.want, tc.got, !tc.ok)
		}
	}
}
