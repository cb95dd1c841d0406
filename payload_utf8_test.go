package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestEnqueueRefusesInvalidUTF8: a payload given as raw JSON bytes that
// are not UTF-8 is refused with ErrInvalid, as JSON must be UTF-8: stored,
// PostgreSQL could not read it as text, and every payload match of the
// store (listings, counts, replays, operations) would fail on it.
func TestEnqueueRefusesInvalidUTF8(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	for _, p := range []any{json.RawMessage("{\"a\":\"\xff\"}"), []byte("[\"\xc3\x28\"]")} {
		if j, err := c.Enqueue(ctx, "k", p); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("Enqueue(%q) = %v, %v; want ErrInvalid", p, j, err)
		}
	}
	if _, err := c.Enqueue(ctx, "k", json.RawMessage(`{"a":"é \u0000"}`)); err != nil {
		t.Errorf("Enqueue of valid UTF-8: %v", err)
	}
}
