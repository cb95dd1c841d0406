package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestThrottleFullTableSparesKnownClients: an attacker with more
// addresses than the throttle remembers (an IPv6 /50 holds 16,384 /64s)
// fills its table with wrong guesses and drains the overflow bucket that
// the clients beyond the table share. A client that has used the right
// token before the attack must keep being served: it cannot be the
// guesser, and refusing it locks every legitimate automation client out
// for as long as the attacker keeps the table full.
func TestThrottleFullTableSparesKnownClients(t *testing.T) {
	now := time.Now()
	th := loginThrottle{now: func() time.Time { return now }}
	right := func() bool { return true }
	wrong := func() bool { return false }
	if allowed, ok, _ := th.guess("automation", right); !allowed || !ok {
		t.Fatal("the automation client with the right token was refused before the attack")
	}
	for i := range 2 * maxThrottled {
		th.guess(fmt.Sprintf("attacker-%d", i), wrong)
	}
	for range loginBurst {
		th.guess("attacker-overflow", wrong)
	}
	if allowed, _, _ := th.guess("attacker-new", wrong); allowed {
		t.Fatal("a fresh attacker address got a guess once the table and the overflow were used up")
	}
	now = now.Add(time.Second)
	if allowed, ok, _ := th.guess("automation", right); !allowed || !ok {
		t.Error("a client that had sent the right token is locked out by another client's wrong guesses")
	}
	// Its own wrong guesses still count: being known buys no guesses.
	for range loginBurst {
		th.guess("automation", wrong)
	}
	if allowed, _, _ := th.guess("automation", right); allowed {
		t.Error("a known client that used up its own guesses was not throttled")
	}
	if n := len(th.clients); n > 2*maxThrottled {
		t.Errorf("the throttle remembers %d clients", n)
	}
}

// slowLink is a listener whose connections model a slow, steady link on
// a clock of their own: each write takes linkTime of it for every 64 KB,
// and a write deadline, set on the wall clock, is kept on the link's
// clock (as far ahead of the link's now as it was of the wall clock's).
// A write that would end past the deadline fails as a real one would.
type slowLink struct{ net.Listener }

// linkTime is how long the link takes to carry 64 KB.
const linkTime = 100 * time.Millisecond

func (l slowLink) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &linkConn{Conn: c}, nil
}

type linkConn struct {
	net.Conn
	mu       sync.Mutex
	now      time.Duration // the link's clock
	deadline time.Duration // on the link's clock; 0 for none
}

func (c *linkConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = 0
	if !t.IsZero() {
		c.deadline = c.now + max(time.Until(t), 1)
	}
	return nil
}

func (c *linkConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *linkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	end := c.now + time.Duration(len(p))*linkTime/(64<<10)
	if c.deadline != 0 && end > c.deadline {
		c.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	c.now = end
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestSlowSteadyReaderGetsWholeList: a client that keeps reading a large
// answer (a page of dead jobs with long errors) at a steady, slow pace is
// never WriteTimeout without progress, so it is not cut off (docs/api.md),
// however long the whole answer takes. The pace is the link's, on a clock
// of its own (slowLink): 64 KB every 100 ms, under the WriteTimeout of
// 300 ms, for some 5 MB, which takes 8 s of the link's time. A reader
// pacing itself on the wall clock was not steady on a loaded machine
// under -race (a 10 ms sleep that lasted past the 300 ms) and was cut
// off as the contract says it should be.
func TestSlowSteadyReaderGetsWholeList(t *testing.T) {
	e := newEnv(t, Options{WriteTimeout: 300 * time.Millisecond})
	e.buryMany("big", strings.Repeat("x", 50_000), 100)
	srv := httptest.NewUnstartedServer(e.api)
	srv.Listener = slowLink{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL + "/v1/dlq?queue=big&limit=100")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err != nil || json.Unmarshal(body, &page) != nil || len(page.Jobs) != 100 {
		t.Fatalf("a steady reader got %d bytes, %d jobs: %v", len(body), len(page.Jobs), err)
	}
}

// slowListStore is a store whose List takes a while, as a search of a
// large dead-letter queue on a busy database does.
type slowListStore struct {
	*sqlite.Store
	delay time.Duration
}

func (s slowListStore) List(ctx context.Context, f store.Filter, p store.Page) (store.ListResult, error) {
	time.Sleep(s.delay) // real time: an answer slower than WriteTimeout is what is tested
	return s.Store.List(ctx, f, p)
}

// TestSlowAnswerNotLost: an answer that takes longer than WriteTimeout
// to compute reaches a client that reads at once: WriteTimeout is about
// clients that take in nothing, and this one was never sent anything to
// take in. Real time passing is what is tested: the list takes 400 ms,
// the write timeout is 100 ms.
func TestSlowAnswerNotLost(t *testing.T) {
	c := redrive.NewClient(slowListStore{openStore(t), 400 * time.Millisecond}, redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet, WriteTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL + "/v1/dlq")
	if err != nil {
		t.Fatalf("a list that took longer than WriteTimeout: %v", err)
	}
	defer res.Body.Close()
	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil || res.StatusCode != 200 {
		t.Fatalf("a list that took longer than WriteTimeout: %d, %v", res.StatusCode, err)
	}
}

// TestThrottleForwardedForWithPort: some proxies (Azure Application
// Gateway, IIS ARR) write the client's port into X-Forwarded-For
// ("203.0.113.5:4711", "[2001:db8::5]:4711"). Such an entry names the
// client as well as a bare address: read as malformed, it made every
// client behind the proxy share the proxy's bucket, so one guesser
// locked everyone out, the defect the key on the client was to end.
func TestThrottleForwardedForWithPort(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.0/8")
	e := newEnv(t, Options{Token: throttleToken, TrustedProxies: []netip.Prefix{proxy}})
	for _, c := range [][2]string{
		{"203.0.113.5:4711", "203.0.113.6:4711"},
		{"[2001:db8:5::5]:4711", "[2001:db8:6::6]:4711"},
	} {
		exhaust(t, e.api, "10.1.2.3:80", "X-Forwarded-For", c[0])
		if r := serveFrom(e.api, "10.1.2.3:80", "GET", "/v1/stats", "Authorization", "Bearer "+throttleToken, "X-Forwarded-For", c[1]); r.status != 200 {
			t.Errorf("X-Forwarded-For %s after %s was throttled: %d, want 200", c[1], c[0], r.status)
		}
	}
}

// TestThrottledGuessesLogBounded: a guesser's refused requests cost it
// nothing, so they must not each cost the server a log line: 200 wrong
// guesses, on the API and the sign-in, must not write 195 warnings (a
// flood of them fills the disk or drowns the log the operator reads).
func TestThrottledGuessesLogBounded(t *testing.T) {
	msgs := make(chan string, 1000)
	e := newEnv(t, Options{Token: throttleToken, Logger: slog.New(messageHandler{msgs})})
	for i := range 200 {
		if i%2 == 0 {
			serveFrom(e.api, "198.51.100.7:4000", "GET", "/v1/stats", "Authorization", "Bearer wrong")
			continue
		}
		form := httptest.NewRequest("POST", "/ui/login", strings.NewReader(url.Values{"token": {"wrong"}}.Encode()))
		form.RemoteAddr = "198.51.100.7:4000"
		form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		e.api.ServeHTTP(httptest.NewRecorder(), form)
	}
	throttled := 0
	for len(msgs) > 0 {
		if strings.Contains(<-msgs, "throttled") {
			throttled++
		}
	}
	if throttled > 4 {
		t.Errorf("200 wrong guesses from one client logged %d throttling warnings", throttled)
	}
}

// slowDeleteStore is a store whose DeleteSchedule takes a while (a lock
// held elsewhere) and deletes.
type slowDeleteStore struct {
	*sqlite.Store
	delay time.Duration
}

func (s slowDeleteStore) DeleteSchedule(context.Context, string) (bool, error) {
	time.Sleep(s.delay) // real time: an answer slower than the write timeouts is what is tested
	return true, nil
}

// TestSlowBareAnswerNotLost: an answer with no body (204), which the
// handler never writes through Write, reaches the client after the
// handler took longer than the write timeouts, the API's and the
// http.Server's (serve sets both). Real time passing is what is tested:
// the delete takes 500 ms, both write timeouts are 200 ms.
func TestSlowBareAnswerNotLost(t *testing.T) {
	st := openStore(t)
	// The schedule exists (DeleteSchedule reads it first, to refuse one a
	// running worker declares).
	now := time.Now()
	if _, err := st.DeclareSchedule(t.Context(), store.ScheduleDecl{Name: "nightly", Spec: []byte(`{}`), Cursor: now}, now); err != nil {
		t.Fatal(err)
	}
	c := redrive.NewClient(slowDeleteStore{st, 500 * time.Millisecond}, redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewUnstartedServer(api)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	req, err := http.NewRequest("DELETE", srv.URL+"/v1/schedules/nightly", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("a 204 that took longer than the write timeouts: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /v1/schedules/nightly: %d, want 204", res.StatusCode)
	}
}

// TestExportHardLinkConfined: a hard link planted at an export's
// temporary file name links a file outside the export folder (os.Root
// cannot tell, a hard link is no path); the export must replace it, not
// write the caller-chosen payload through it into that file.
func TestExportHardLinkConfined(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "precious")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{ExportDir: root})
	e.runWorker()
	ids := e.buryMany("x", "boom", 1)
	jd := filepath.Join(root, "out", strconv.FormatInt(ids[0], 10))
	if err := os.MkdirAll(jd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, filepath.Join(jd, "payload.json.tmp")); err != nil {
		t.Skipf("no hard link here: %v", err)
	}
	var ob operationBody
	e.want(e.do("POST", "/v1/dlq/export?wait=true", `{"filter":{"queue":"x"},"dir":"out"}`), 200, &ob)
	if b, err := os.ReadFile(target); err != nil || string(b) != "precious\n" {
		t.Errorf("the export wrote through a hard link outside the export folder: %q, %v (operation %+v)", b, err, ob.Operation)
	}
}

// TestWaitOutlastsWriteTimeoutHTTP2: as TestWaitOutlastsWriteTimeout,
// over HTTP/2, where a write deadline is a timer on the stream that
// resets it when it fires, writing or not. Real time passing is what is
// tested: the redrive is held by its rate to at least a second, the
// write timeout is 200 ms.
func TestWaitOutlastsWriteTimeoutHTTP2(t *testing.T) {
	st := openStore(t)
	e := newEnvOn(t, st, Options{WriteTimeout: 200 * time.Millisecond})
	e.srv.Close()
	srv := httptest.NewUnstartedServer(e.api)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.srv = srv
	e.runWorker()
	ids := e.buryMany("w", "boom", 3)
	b, _ := json.Marshal(map[string]any{"ids": ids, "rate": 2})
	req, err := http.NewRequest("POST", srv.URL+"/v1/dlq/redrive?wait=true", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("wait=true over HTTP/2: %v", err)
	}
	defer res.Body.Close()
	if res.ProtoMajor != 2 {
		t.Fatalf("served over %s, want HTTP/2", res.Proto)
	}
	var ob operationBody
	if err := json.NewDecoder(res.Body).Decode(&ob); err != nil || res.StatusCode != 200 || ob.Operation.State != OperationDone {
		t.Fatalf("wait=true over HTTP/2: %d %+v, %v", res.StatusCode, ob.Operation, err)
	}
}
