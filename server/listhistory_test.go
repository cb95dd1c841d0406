package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
)

// TestListHistoryShape: history=true gives every listed job its history,
// [] for a job with none yet (a pending job), as listings did before
// they left it out: a client asking for histories reads the key on every
// job.
func TestListHistoryShape(t *testing.T) {
	e := newEnv(t, Options{})
	j, err := e.client.Enqueue(context.Background(), "email", map[string]any{"to": "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	e.want(e.do("GET", "/v1/jobs?history=true", ""), http.StatusOK, &page)
	if len(page.Jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(page.Jobs))
	}
	if h, ok := page.Jobs[0]["history"]; !ok || string(h) != "[]" {
		t.Errorf("history=true: job %d's history is %q (present %v), want []", j.ID, h, ok)
	}
}
