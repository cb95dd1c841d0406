package apiclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redrivehq/redrive/apiclient"
)

// TestRetryAfterHTTPDate: a Retry-After given as an HTTP date (RFC 9110
// allows it; proxies and load balancers send it) is a wait too, not 0.
func TestRetryAfterHTTPDate(t *testing.T) {
	at := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", at)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := apiclient.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stats(context.Background())
	e, ok := errors.AsType[*apiclient.Error](err)
	if !ok {
		t.Fatalf("err = %v, want an *apiclient.Error", err)
	}
	// An hour ahead, give or take the seconds the date drops and a slow
	// machine: the bounds are wide on purpose.
	if e.RetryAfter < 50*time.Minute || e.RetryAfter > 61*time.Minute {
		t.Fatalf("RetryAfter = %v for Retry-After: %s, want about an hour", e.RetryAfter, at)
	}
}

// TestPagesCursorCycle: a server whose cursors go round (a, b, a, b, ...)
// ends the iteration with an error instead of looping for ever.
func TestPagesCursorCycle(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := "a"
		if r.URL.Query().Get("cursor") == "a" {
			next = "b"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobs":[{"id":1}],"next":"` + next + `"}`))
	}))
	defer srv.Close()
	c, err := apiclient.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	var last error
	for _, err := range c.JobPages(context.Background(), apiclient.JobQuery{}) {
		if err != nil {
			last = err
			break
		}
		if pages++; pages > 20 {
			t.Fatal("JobPages went on past 20 pages of a server whose cursors go round")
		}
	}
	if last == nil {
		t.Fatal("no error for cursors going round")
	}
}

// TestOperationPagesCursorCycle is TestPagesCursorCycle for the
// operations listing.
func TestOperationPagesCursorCycle(t *testing.T) {
	const a, b = "op_aaaaaaaaaaaaaaaaaaaaaaaa", "op_bbbbbbbbbbbbbbbbbbbbbbbb"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := a
		if r.URL.Query().Get("before") == a {
			next = b
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"operations":[],"next":"` + next + `"}`))
	}))
	defer srv.Close()
	c, err := apiclient.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	var last error
	for _, err := range c.OperationPages(context.Background(), 10) {
		if err != nil {
			last = err
			break
		}
		if pages++; pages > 20 {
			t.Fatal("OperationPages went on past 20 pages of a server whose cursors go round")
		}
	}
	if last == nil {
		t.Fatal("no error for cursors going round")
	}
}

// TestOperationDotID: an operation id of dots is a name, not a step up
// the path: "." must not read GET /v1/operations (the listing) and
// answer an empty operation without an error.
func TestOperationDotID(t *testing.T) {
	e := newEnv(t, "")
	for _, id := range []string{".", ".."} {
		op, err := e.c.Operation(context.Background(), id)
		if !apiclient.IsNotFound(err) {
			t.Errorf("Operation(%q) = %+v, %v; want a 404", id, op, err)
		}
		if _, err := e.c.CancelOperation(context.Background(), id); !apiclient.IsNotFound(err) {
			t.Errorf("CancelOperation(%q): %v; want a 404", id, err)
		}
	}
}

// TestTokenNotSentToAnotherOrigin: a redirect to another origin (here
// the same host on another port: another service) does not carry the
// bearer token; Go's client keeps Authorization for any port of the same
// host, and across http and https.
func TestTokenNotSentToAnotherOrigin(t *testing.T) {
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer api.Close()
	c, err := apiclient.New(api.URL, apiclient.WithToken("s3cret-token-of-the-api"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Stats(context.Background())
	select {
	case h := <-got:
		if h != "" {
			t.Fatalf("the other origin got Authorization: %q", h)
		}
	default:
		// Not followed at all: no leak either.
	}
}
