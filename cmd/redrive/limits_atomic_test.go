package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestLimitsSetAtomic: `limits set` with a max, a rate and the hold
// changes all three or none, as PUT /v1/limits does: a server that fails
// the change of the hold (a 503: restarted, overloaded) leaves the limit
// as it was, not with its new max and rate and its old hold.
func TestLimitsSetAtomic(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	api := server.New(server.Options{Client: client, Token: "s3cret", Logger: log})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte("hold_on_retry_after")) {
				http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusServiceUnavailable)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		api.Close()
		ts.Close()
		st.Close()
	})
	if _, _, err := runCLI(t, "--server", ts.URL, "--token", "s3cret", "limits", "set", "pay", "3", "--rate", "10/s", "--hold", "on"); err == nil {
		t.Fatal("limits set succeeded though the server failed the change")
	}
	ls, err := client.LimitStates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 0 {
		t.Errorf("after a failed limits set the store keeps %+v, want the limit as it was (none)", ls)
	}
}
