package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// queryRoutes are the GET routes whose query string the API parses: the
// listings' filters, cursors and limits, the series' since, the counts.
var queryRoutes = []string{
	"/v1/jobs",
	"/v1/dlq",
	"/v1/dlq/groups",
	"/v1/dlq/export",
	"/v1/jobs/count",
	"/v1/dlq/count",
	"/v1/stats/series",
	"/v1/operations",
	"/v1/queues",
	"/v1/stats",
}

// FuzzQuery sends arbitrary query strings to every GET route that reads
// one: the answer is 200 or a 4xx with the JSON error shape, never a 5xx
// or a panic, and a 200 is valid JSON (or NDJSON for the export).
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"",
		"queue=mail&kind=email&state=dead&limit=10",
		"state=pending,running&class=transient&reason=http_503",
		"since=2026-01-01T00:00:00Z&until=2026-02-01T00:00:00Z&q=timeout",
		"since=1h", "since=7d", "since=8d", "since=-1h", "since=0s", "since=9999999999h",
		"cursor=abc&limit=0", "limit=1001", "limit=-1", "limit=1e3",
		"fingerprint=c355063b135e240e", "state=bogus", "class=Permanent",
		"queue=%00", "queue=%ff%fe", "q=%", "queue=a&queue=b", "unknown=1",
		"since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z",
		"until=30m", "since=7d&until=1h", "since=1h&until=7d", "since=1h30m&until=2026-01-01T00:00:00Z", "until=-5m", "since=1001d",
	} {
		for i := range queryRoutes {
			f.Add(uint8(i), s)
		}
	}
	h := fuzzHandlerWithJobs(f)
	f.Fuzz(func(t *testing.T, route uint8, raw string) {
		path := queryRoutes[int(route)%len(queryRoutes)]
		req := httptest.NewRequest("GET", path, nil)
		req.URL = &url.URL{Path: path, RawQuery: raw}
		req.RequestURI = req.URL.RequestURI()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("GET %s?%s: status %d: %s", path, raw, rec.Code, rec.Body.Bytes())
		case rec.Code >= 400:
			checkErrorShape(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
		case rec.Code != http.StatusOK:
			t.Fatalf("GET %s?%s: unexpected status %d", path, raw, rec.Code)
		case path == "/v1/dlq/export":
			// NDJSON: one JSON object per line (none when nothing matches).
			if rec.Body.Len() != 0 && !json.Valid(rec.Body.Bytes()[:indexNL(rec.Body.Bytes())]) {
				t.Fatalf("GET %s?%s: export line is not JSON: %s", path, raw, rec.Body.Bytes())
			}
		default:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("GET %s?%s: 200 with a body that is not JSON: %s", path, raw, rec.Body.Bytes())
			}
		}
	})
}

// fuzzHandlerWithJobs is the API on a store holding a few jobs in two
// queues, some dead, so that listings, cursors, groups and the export
// have rows to page through.
func fuzzHandlerWithJobs(f *testing.F) http.Handler {
	st := openStore(f)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	ctx := context.Background()
	for i := range 6 {
		q := []string{"mail", "sms"}[i%2]
		if _, err := c.Enqueue(ctx, "k", map[string]int{"n": i}, redrive.InQueue(q)); err != nil {
			f.Fatal(err)
		}
	}
	now := time.Now()
	got, err := st.Fetch(ctx, store.FetchParams{Queue: "mail", Limit: 2, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 2 {
		f.Fatalf("fetch: %v %v", got, err)
	}
	for i, j := range got {
		class := []failure.Class{failure.Permanent, failure.Transient}[i]
		if _, err := st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: "mail", Attempt: j.Attempt, Lease: j.Lease, Worker: "w",
			Kind: store.Bury, At: now, Class: class, DeadReason: class.String(), Fingerprint: fmt.Sprintf("fp%d", i), Error: "boom",
			Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now, Class: class.String(), Error: "boom"}}}); err != nil {
			f.Fatal(err)
		}
	}
	s := New(Options{Client: c, Logger: quiet, MaxBody: 64 << 10})
	f.Cleanup(func() { _ = s.Close() })
	return s
}

func indexNL(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return len(b)
}

// FuzzSession feeds arbitrary cookie values to the dashboard's session
// check: it never panics, and it accepts a value only when the value is
// exactly a session this server made (its time and the MAC of that time
// under the token).
func FuzzSession(f *testing.F) {
	st := openStore(f)
	tok := Token{Name: "alice", Role: RoleRead, SHA256: sha256.Sum256([]byte("tok-123"))}
	a := &api{tokens: []Token{tok}, client: redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})}
	key, err := st.Secret(context.Background(), sessionSecret)
	if err != nil {
		f.Fatal(err)
	}
	mac := func(ts string) string { return sessionMAC(tok, key, ts) }
	session := func(t time.Time) string { return newSession(tok, key, t) }
	now := time.Now()
	for _, s := range []string{
		session(now), session(now.Add(-SessionTTL)), "", ".", "1.", ".ab", "x.y",
		"99999999999999999999.alice." + mac("99999999999999999999"), "-1.alice." + mac("-1"),
		"+" + session(now), "0" + session(now), session(now) + "0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		req := httptest.NewRequest("GET", "/v1/stats", nil)
		req.Header.Set("Cookie", sessionCookie+"="+v)
		p, ok, err := a.validSession(req)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if !ok {
			return
		}
		c, err := req.Cookie(sessionCookie)
		if err != nil {
			t.Fatalf("accepted %q without a readable cookie: %v", v, err)
		}
		if p.name != tok.Name || p.role != tok.Role {
			t.Fatalf("accepted %q as %+v", v, p)
		}
		ts, _, _ := strings.Cut(c.Value, ".")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || c.Value != session(time.Unix(sec, 0)) {
			t.Fatalf("accepted %q, which is not a session this server makes", v)
		}
	})
}
