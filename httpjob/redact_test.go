package httpjob_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/httpjob"
)

// TestSecretsArriveButAreNotKept: the handler sends the payload's
// secret headers and query as they are (the server checks them), while
// the error of a server that echoes them back (a 500 whose body holds the
// request's headers and URL) is kept masked in the job's last error and
// history, and the worker's logs never print them.
func TestSecretsArriveButAreNotKept(t *testing.T) {
	const auth, key, query = "Bearer tok-SECRET-1111", "key-SECRET-2222", "q-SECRET-3333"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key")+"|"+r.URL.Query().Get("access_token"))
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "echo: Authorization="+r.Header.Get("Authorization")+" X-Api-Key="+r.Header.Get("X-Api-Key")+" url="+r.URL.String())
	}))
	t.Cleanup(srv.Close)
	var logs lockedBuffer
	client := startLogging(t, httpjob.Options{}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	j := run(t, client, map[string]any{"url": srv.URL + "/hook?access_token=" + query,
		"headers": map[string]string{"Authorization": auth, "X-Api-Key": key, "X-Plain": "visible"}})
	if j.State != redrive.Dead {
		t.Fatalf("state %s, want dead", j.State)
	}
	mu.Lock()
	for _, s := range seen {
		if s != auth+"|"+key+"|"+query {
			t.Errorf("the server got %q, want the real secrets", s)
		}
	}
	if len(seen) == 0 {
		t.Error("no request reached the server")
	}
	mu.Unlock()
	texts := map[string]string{"last error": j.LastError, "logs": logs.String()}
	for i, ev := range j.History {
		texts["history "+string(ev.Kind)+" "+string(rune('0'+i))] = ev.Error + " " + ev.Note
	}
	for what, text := range texts {
		for _, s := range []string{"tok-SECRET-1111", key, query} {
			if strings.Contains(text, s) {
				t.Errorf("the %s holds the secret %q: %s", what, s, text)
			}
		}
	}
	if !strings.Contains(j.LastError, "•••") || !strings.Contains(j.LastError, "500") {
		t.Errorf("last error %q: want the status, the secrets masked", j.LastError)
	}
}

// TestSecretsMaskedWhateverTheFieldsCase: the handler takes a payload
// whose fields are written in another case ({"URL", "Headers"}: it
// decodes with encoding/json, which ignores case), and sends its
// secrets; the echo of a failing server is masked all the same.
func TestSecretsMaskedWhateverTheFieldsCase(t *testing.T) {
	const auth, query = "Bearer tok-SECRET-4444", "q-SECRET-5555"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+"|"+r.URL.Query().Get("access_token"))
		mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "echo: Authorization="+r.Header.Get("Authorization")+" url="+r.URL.String())
	}))
	t.Cleanup(srv.Close)
	var logs lockedBuffer
	client := startLogging(t, httpjob.Options{}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	j := run(t, client, map[string]any{"URL": srv.URL + "/hook?access_token=" + query,
		"Headers": map[string]string{"Authorization": auth}})
	mu.Lock()
	if len(seen) == 0 || seen[0] != auth+"|"+query {
		t.Errorf("the server got %q, want the real secrets", seen)
	}
	mu.Unlock()
	texts := map[string]string{"last error": j.LastError, "logs": logs.String()}
	for i, ev := range j.History {
		texts["history "+string(ev.Kind)+" "+string(rune('0'+i))] = ev.Error + " " + ev.Note
	}
	for what, text := range texts {
		for _, s := range []string{"tok-SECRET-4444", query} {
			if strings.Contains(text, s) {
				t.Errorf("the %s holds the secret %q: %s", what, s, text)
			}
		}
	}
}

// TestSecretsMaskedInDuplicateHeaders: a payload enqueued through the Go
// client with "headers" twice; the handler sends the headers of both
// (encoding/json merges them), and the echo of a failing server is
// masked all the same.
func TestSecretsMaskedInDuplicateHeaders(t *testing.T) {
	const auth = "Bearer tok-SECRET-6666"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "echo: Authorization="+r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	var logs lockedBuffer
	client := startLogging(t, httpjob.Options{}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	j := run(t, client, json.RawMessage(`{"url":"`+srv.URL+`/hook","headers":{"Authorization":"`+auth+`"},"headers":{"X-Plain":"1"}}`))
	mu.Lock()
	if len(seen) == 0 || seen[0] != auth {
		t.Errorf("the server got %q, want the real secret", seen)
	}
	mu.Unlock()
	for what, text := range map[string]string{"last error": j.LastError, "logs": logs.String()} {
		if strings.Contains(text, "tok-SECRET-6666") {
			t.Errorf("the %s holds the secret", what)
		}
	}
}
