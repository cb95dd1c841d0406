package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
)

// foreignAttackPage is the page a foreign web site shows the operator.
// Its script tries to write to the API (a job enqueued with a text/plain
// body in no-cors mode, a job enqueued as JSON, a queue paused by an
// auto-submitted form) and to read it (the job list), and sets
// window.attackResults to what it got. ?base= is where the API is (""
// for its own origin); ?tag= names the queue it tries to pause and to
// enqueue to, and the kinds of its jobs (tag.text, tag.json), so that
// each run of the page is checked apart.
const foreignAttackPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>cute cats</title></head>
<body>
<h1>cute cats</h1>
<pre id="out"></pre>
<script>
(async () => {
	const params = new URLSearchParams(location.search);
	const base = params.get('base') || '';
	const tag = params.get('tag');
	const r = {};
	const outcome = async (p) => {
		try {
			const res = await p;
			let body = '';
			try { body = await res.text(); } catch (e) { body = 'unreadable: ' + e; }
			return {type: res.type, status: res.status, body, error: ''};
		} catch (e) {
			return {type: '', status: 0, body: '', error: String(e) || 'rejected'};
		}
	};
	// 1. A "simple" request: no preflight, the browser sends it as is.
	r.noCorsText = await outcome(fetch(base + '/v1/jobs', {
		method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
		body: JSON.stringify({kind: tag + '.text', queue: tag, payload: {}})}));
	// 2. JSON: cross-origin, this needs a preflight.
	r.jsonPost = await outcome(fetch(base + '/v1/jobs', {
		method: 'POST', headers: {'Content-Type': 'application/json'},
		body: JSON.stringify({kind: tag + '.json', queue: tag, payload: {}})}));
	// 3. A hidden form (no fields, so an empty text/plain body) submitted
	// into a hidden iframe.
	r.form = await new Promise((resolve) => {
		const sink = document.createElement('iframe');
		sink.name = 'sink';
		sink.style.display = 'none';
		document.body.appendChild(sink);
		const form = document.createElement('form');
		form.method = 'POST';
		form.enctype = 'text/plain';
		form.action = base + '/v1/queues/' + tag + '/pause';
		form.target = 'sink';
		form.style.display = 'none';
		document.body.appendChild(form);
		const timer = setTimeout(() => resolve({loaded: false, body: ''}), 5000);
		sink.addEventListener('load', () => {
			clearTimeout(timer);
			let body = '';
			try { body = sink.contentDocument.body.textContent; } catch (e) { body = 'unreadable: ' + e.name; }
			resolve({loaded: true, body});
		});
		form.submit();
	});
	// 4. Read the job list.
	r.read = await outcome(fetch(base + '/v1/jobs'));
	document.getElementById('out').textContent = JSON.stringify(r, null, 1);
	window.attackResults = r;
})();
</script>
</body></html>
`

// fetchOutcome is what the page got from one fetch.
type fetchOutcome struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Body   string `json:"body"`
	Error  string `json:"error"`
}

type attackResults struct {
	NoCorsText fetchOutcome `json:"noCorsText"`
	JSONPost   fetchOutcome `json:"jsonPost"`
	Form       struct {
		Loaded bool   `json:"loaded"`
		Body   string `json:"body"`
	} `json:"form"`
	Read fetchOutcome `json:"read"`
}

// servedRequest is a request the API's listener got, and its answer.
type servedRequest struct {
	method, path, host, origin, site, contentType string
	status                                        int
	allowOrigin                                   string
}

func (s servedRequest) String() string {
	return fmt.Sprintf("%s %s (Host %s, Origin %q, Sec-Fetch-Site %q, Content-Type %q) -> %d",
		s.method, s.path, s.host, s.origin, s.site, s.contentType, s.status)
}

// requestLog records the requests a handler answers.
type requestLog struct {
	mu  sync.Mutex
	all []servedRequest
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.all = append(l.all, servedRequest{method: r.Method, path: r.URL.Path, host: r.Host,
			origin: r.Header.Get("Origin"), site: r.Header.Get("Sec-Fetch-Site"),
			contentType: r.Header.Get("Content-Type"), status: sw.status,
			allowOrigin: w.Header().Get("Access-Control-Allow-Origin")})
	})
}

// take returns the requests recorded since the last take.
func (l *requestLog) take() []servedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := l.all
	l.all = nil
	return all
}

// TestForeignPageCannotUseAPI drives a headless Chromium against a server
// with no token configured as `redrive serve` configures it on loopback,
// and shows that a page of another origin can neither write to the API
// nor read it, and neither can a page the browser believes is of the
// API's origin after a DNS rebinding; the same page served from the
// API's own origin can (the control that shows the attacks would have
// worked). Each verdict is checked in the store, in what the page got,
// and in what the server received.
func TestForeignPageCannotUseAPI(t *testing.T) {
	chromiumPath(t) // skip early without a browser
	ctx := context.Background()

	// The API, as serve on 127.0.0.1 configures it: no token, the
	// loopback names and the listen host allowed.
	st := openStore(t)
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: client, Logger: quiet, AllowedHosts: append(slices.Clone(LoopbackHosts), "127.0.0.1")})
	t.Cleanup(func() { _ = api.Close() })
	// Only in this test, /attack.html is served beside the API, outside
	// its guards: on the host name rebind.test (which Chromium resolves to
	// 127.0.0.1) it models the attacker's page after a DNS rebinding, which
	// the browser takes for the API's origin; on 127.0.0.1 it is the
	// control, a page of the API's own origin.
	var log requestLog
	pageHandler := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(foreignAttackPage))
	}
	apiSrv := httptest.NewServer(log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/attack.html" {
			pageHandler(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})))
	t.Cleanup(apiSrv.Close)
	// The attacker's own server: another origin (another port).
	evilSrv := httptest.NewServer(http.HandlerFunc(pageHandler))
	t.Cleanup(evilSrv.Close)
	_, apiPort, _ := strings.Cut(strings.TrimPrefix(apiSrv.URL, "http://"), ":")

	// A job whose payload a reader would see.
	const secret = "s3cret-payload-7d1f"
	if _, err := client.Enqueue(ctx, "report.build", map[string]string{"secret": secret}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t,
		chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1, MAP evil.test 127.0.0.1"),
		chromedp.Flag("no-proxy-server", true))
	attack := func(t *testing.T, page string) (attackResults, []servedRequest) {
		t.Helper()
		log.take()
		b.run(t, "open "+page, chromedp.Navigate(page))
		res, err := chromedp.Run(b.ctx, chromedp.Poll[attackResults](`window.attackResults`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			t.Fatalf("the page at %s did not finish: %v\nbrowser problems: %v", page, err, b.problemList())
		}
		return res, log.take()
	}
	unchanged := func(t *testing.T, tag string) {
		t.Helper()
		for _, kind := range []string{tag + ".text", tag + ".json"} {
			if n := jobsOf(t, client, kind); n != 0 {
				t.Errorf("the page created %d %s jobs", n, kind)
			}
		}
		if n, err := client.Count(ctx, redrive.Filter{Queue: tag}); err != nil || n != 0 {
			t.Errorf("the page created %d jobs in the queue %s (%v)", n, tag, err)
		}
		if isPaused(t, client, tag) {
			t.Errorf("the page paused the queue %s", tag)
		}
	}
	noJobData := func(t *testing.T, r attackResults) {
		t.Helper()
		for what, body := range map[string]string{"no-cors POST": r.NoCorsText.Body, "JSON POST": r.JSONPost.Body,
			"form": r.Form.Body, "GET /v1/jobs": r.Read.Body} {
			if strings.Contains(body, secret) || strings.Contains(body, "report.build") {
				t.Errorf("%s: the page read job data: %s", what, body)
			}
		}
	}
	// requests returns the recorded requests for method and path.
	requests := func(got []servedRequest, method, path string) []servedRequest {
		var out []servedRequest
		for _, s := range got {
			if s.method == method && s.path == path {
				out = append(out, s)
			}
		}
		return out
	}

	// Another origin: the attacker's server on another port of 127.0.0.1
	// (the same site: Chromium sends Sec-Fetch-Site: same-site), and
	// under a host name of its own (another site: cross-site).
	_, evilPort, _ := strings.Cut(strings.TrimPrefix(evilSrv.URL, "http://"), ":")
	for _, c := range []struct{ name, origin, tag string }{
		{"other origin", evilSrv.URL, "foreign"},
		{"other site", "http://evil.test:" + evilPort, "evil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, got := attack(t, c.origin+"/attack.html?tag="+c.tag+"&base="+url.QueryEscape(apiSrv.URL))
			t.Logf("page got %+v", r)
			t.Logf("the server got %v", got)
			unchanged(t, c.tag)
			noJobData(t, r)
			// What the page saw: an opaque answer to the no-cors POST,
			// errors where CORS withholds the answer.
			if r.NoCorsText.Type != "opaque" || r.NoCorsText.Status != 0 || r.NoCorsText.Body != "" {
				t.Errorf("no-cors POST: %+v, want an opaque response", r.NoCorsText)
			}
			if r.JSONPost.Error == "" {
				t.Errorf("JSON POST: %+v, want the fetch to fail (no preflight is granted)", r.JSONPost)
			}
			if r.Read.Error == "" || r.Read.Body != "" {
				t.Errorf("GET /v1/jobs: %+v, want the fetch to fail (CORS)", r.Read)
			}
			if !r.Form.Loaded || !strings.HasPrefix(r.Form.Body, "unreadable") {
				t.Errorf("form: %+v, want the answer loaded but unreadable", r.Form)
			}
			// What the server saw: the writes arrived, from the page's
			// origin, and were refused as cross-origin (once each: for
			// /v1/jobs, the no-cors POST; the JSON one never came past
			// its preflight); the read was answered, but nothing was
			// granted to the page's origin.
			for _, path := range []string{"/v1/jobs", "/v1/queues/" + c.tag + "/pause"} {
				posts := requests(got, "POST", path)
				if len(posts) != 1 {
					t.Errorf("POST %s reached the server %d times, want once: %v", path, len(posts), got)
				}
				for _, s := range posts {
					if s.status != http.StatusForbidden || s.contentType == "application/json" || s.origin != c.origin {
						t.Errorf("%v, want 403 to a request from %s that is not JSON", s, c.origin)
					}
				}
			}
			if gets := requests(got, "GET", "/v1/jobs"); len(gets) != 1 {
				t.Errorf("GET /v1/jobs reached the server %d times, want once: %v", len(gets), got)
			}
			for _, s := range got {
				if s.allowOrigin != "" {
					t.Errorf("%v answered Access-Control-Allow-Origin %q", s, s.allowOrigin)
				}
				if s.status < 400 && !(s.method == "GET" && s.path == "/v1/jobs") {
					t.Errorf("%v, want an error status", s)
				}
			}
		})
	}

	t.Run("DNS rebinding", func(t *testing.T) {
		page := "http://rebind.test:" + apiPort + "/attack.html?tag=rebind"
		r, got := attack(t, page)
		t.Logf("page got %+v", r)
		unchanged(t, "rebind")
		noJobData(t, r)
		// The page is same-origin with what it fetches, so it sees the
		// answers: every one is the Host check's refusal.
		for what, o := range map[string]fetchOutcome{"no-cors POST": r.NoCorsText, "JSON POST": r.JSONPost, "GET /v1/jobs": r.Read} {
			if o.Status != http.StatusMisdirectedRequest || !strings.Contains(o.Body, "host_not_allowed") {
				t.Errorf("%s: %+v, want 421 host_not_allowed", what, o)
			}
		}
		if !r.Form.Loaded || !strings.Contains(r.Form.Body, "host_not_allowed") {
			t.Errorf("form: %+v, want the 421 host_not_allowed answer", r.Form)
		}
		// Each request reached the server and was refused (Chromium sends
		// a request answered 421 a second time, on a new connection).
		for _, s := range got {
			if s.path == "/attack.html" {
				continue
			}
			if s.host != "rebind.test:"+apiPort || s.status != http.StatusMisdirectedRequest {
				t.Errorf("%v, want 421 for the host rebind.test", s)
			}
		}
		for _, want := range [][2]string{{"POST", "/v1/jobs"}, {"POST", "/v1/queues/rebind/pause"}, {"GET", "/v1/jobs"}} {
			if len(requests(got, want[0], want[1])) == 0 {
				t.Errorf("%s %s did not reach the server: %v", want[0], want[1], got)
			}
		}
		if n := len(requests(got, "POST", "/v1/jobs")); n < 2 {
			t.Errorf("POST /v1/jobs reached the server %d times, want the no-cors and the JSON one: %v", n, got)
		}
	})

	// The control: the same page from the API's own origin does what the
	// others could not, so the set-up can write and read.
	t.Run("own origin", func(t *testing.T) {
		page := apiSrv.URL + "/attack.html?tag=own"
		r, got := attack(t, page)
		t.Logf("page got %+v", r)
		if r.JSONPost.Status != http.StatusCreated {
			t.Errorf("JSON POST: %+v, want 201", r.JSONPost)
		}
		if n := jobsOf(t, client, "own.json"); n != 1 {
			t.Errorf("%d own.json jobs, want 1", n)
		}
		// A text/plain body is refused even from the own origin.
		if r.NoCorsText.Status != http.StatusUnsupportedMediaType || jobsOf(t, client, "own.text") != 0 {
			t.Errorf("text/plain POST: %+v, want 415 and no job", r.NoCorsText)
		}
		if !r.Form.Loaded || !isPaused(t, client, "own") {
			t.Errorf("form: %+v, paused %v; want the queue own paused", r.Form, isPaused(t, client, "own"))
		}
		// The seeded job's kind: its payload's field "secret" is shown
		// masked (docs/security.md, redaction).
		if r.Read.Status != http.StatusOK || !strings.Contains(r.Read.Body, `"kind":"report.build"`) {
			t.Errorf("GET /v1/jobs: %+v, want 200 with the seeded job", r.Read)
		}
		if len(requests(got, "POST", "/v1/queues/own/pause")) != 1 {
			t.Errorf("the pause did not reach the server once: %v", got)
		}
	})
}
