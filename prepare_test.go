package redrive_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// Prepare checks a request as Enqueue does and returns the job Enqueue
// would store, with the due time counted from the now it is given.
func TestPrepare(t *testing.T) {
	c := redrive.NewClient(nil, redrive.ClientOptions{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nj, err := c.Prepare(redrive.Request{Kind: "email", Payload: map[string]string{"to": "a"}, Delay: time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	if nj.Queue != redrive.DefaultQueue || nj.MaxRetries != -1 || string(nj.Payload) != `{"to":"a"}` || !nj.RunAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("prepared %+v", nj)
	}
	if _, err := c.Prepare(redrive.Request{Kind: "a/b"}, now); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("a kind with a slash: %v, want ErrInvalid", err)
	}
	c.SetValidator("email", func(p json.RawMessage) error { return errors.New("no recipient") })
	if _, err := c.Prepare(redrive.Request{Kind: "email"}, now); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("a payload the validator refuses: %v, want ErrInvalid", err)
	}
}
