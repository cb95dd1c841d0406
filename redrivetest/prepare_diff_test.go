package redrivetest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
)

// A Runner builds its jobs with Client.Prepare: it accepts exactly the
// requests Enqueue accepts on a real store, and builds the job Enqueue
// stores.
func TestPrepareAgreesWithEnqueue(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	c.SetValidator("validated", func(p json.RawMessage) error {
		if !strings.Contains(string(p), "ok") {
			return errors.New("not ok")
		}
		return nil
	})
	bad := retry.DefaultPolicy()
	bad.Multiplier = 0.5
	big := strings.Repeat("x", redrive.DefaultMaxPayload)
	n := -1
	reqs := []redrive.Request{
		{Kind: "k"},
		{Kind: ""},
		{Kind: "a b"},
		{Kind: "a/b"},
		{Kind: strings.Repeat("k", 200)},
		{Kind: strings.Repeat("k", 300)},
		{Kind: "é"},
		{Kind: "k\x00"},
		{Kind: "k", Queue: "q q"},
		{Kind: "k", Queue: strings.Repeat("q", 300)},
		{Kind: "k", Payload: json.RawMessage(`{`)},
		{Kind: "k", Payload: []byte(`[1,2]`)},
		{Kind: "k", Payload: json.RawMessage(`{"a":1,"a":2}`)},
		{Kind: "k", Payload: json.RawMessage(`"\u0000"`)},
		{Kind: "k", Payload: json.RawMessage("\"\xff\"")},
		{Kind: "k", Payload: math.NaN()},
		{Kind: "k", Payload: make(chan int)},
		{Kind: "k", Payload: big},
		{Kind: "k", IdempotencyKey: strings.Repeat("u", 512)},
		{Kind: "k", IdempotencyKey: strings.Repeat("u", 513)},
		{Kind: "k", IdempotencyKey: "\x00"},
		{Kind: "k", Delay: -time.Hour},
		{Kind: "k", Delay: math.MaxInt64},
		{Kind: "k", RunAt: time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)},
		{Kind: "k", RunAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: "k", MaxRetries: &n},
		{Kind: "k", Policy: &bad},
		{Kind: "k", Dependency: "a b"},
		{Kind: "validated", Payload: "ok"},
		{Kind: "validated", Payload: "no"},
	}
	for i, r := range reqs {
		now := time.Now()
		nj, perr := c.Prepare(r, now)
		j, eerr := c.EnqueueMany(ctx, []redrive.Request{r})
		if (perr == nil) != (eerr == nil) {
			t.Errorf("request %d (kind %.20q): Prepare says %v, Enqueue %v", i, r.Kind, perr, eerr)
			continue
		}
		if perr != nil {
			continue
		}
		got := j[0]
		if string(got.Payload) != string(nj.Payload) || got.Queue != nj.Queue || got.MaxRetries != nj.MaxRetries {
			t.Errorf("request %d: prepared %s/%s/%d, enqueued %s/%s/%d", i, nj.Queue, nj.Payload, nj.MaxRetries,
				got.Queue, got.Payload, got.MaxRetries)
		}
	}
}
