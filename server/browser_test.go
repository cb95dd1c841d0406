package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
)

// chromiumPath finds the browser the dashboard tests drive: $REDRIVE_CHROMIUM,
// else chromium or chromium-browser on PATH. Without one the tests skip,
// except under CI (CI set), where .ci/run installs Debian's chromium and a
// missing browser is a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("REDRIVE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH and REDRIVE_CHROMIUM unset: the dashboard tests need a headless Chromium (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH; set REDRIVE_CHROMIUM to run the dashboard tests")
	return ""
}

// browser is a headless Chromium tab that records what the page did:
// every request it sent, and every error it logged or threw.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	requests []string
	problems []string
}

func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	opts = append(opts, extra...)
	b := &browser{}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	// A liveness bound on the whole browser session: a test on a loaded
	// machine (-race beside other test binaries) took 91 s, past the
	// minute this bound was.
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b.ctx = ctx
	enable := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{})
		return err
	})
	if err := chromedp.Do(ctx, enable); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// listen records requests and problems; it runs in the tab's read loop.
func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, ev.Request.URL)
	case *runtime.EventExceptionThrown:
		msg := ev.ExceptionDetails.Text
		if ex := ev.ExceptionDetails.Exception; ex != nil {
			msg += " " + ex.Description
		}
		b.problems = append(b.problems, "exception: "+msg)
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
		}
	case *cdplog.EventEntryAdded:
		// CSP violations and failed loads are reported here.
		if ev.Entry.Level == cdplog.EntryLevelError {
			b.problems = append(b.problems, fmt.Sprintf("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// run runs steps, failing the test with what on error.
func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		t.Fatalf("%s: %v\nbrowser problems: %v", what, err, b.problemList())
	}
}

// runWithin is run with a deadline: waiting for what the page should show
// fails within d when the page never shows it. d is a liveness bound, at
// least a minute: a loaded machine took more than 10 s to navigate.
func (b *browser) runWithin(t *testing.T, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, max(d, time.Minute))
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v\nbrowser problems: %v", what, err, b.problemList())
	}
}

// text returns the text of the first visible element matching the CSS
// selector sel.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// textNow returns the text of the first element matching the CSS selector
// sel as the page is now, or "" when none does, without waiting for one:
// a check of what the page should show fails at once when it does not.
func (b *browser) textNow(t *testing.T, sel string) string {
	t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); return el ? el.innerText : ''; })()`, sel)
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// noJunk fails the test if the page shows what a rendering slip leaves:
// "undefined", "NaN", "[object Object]", or a stray "false"/"null" in an
// open dialog.
func (b *browser) noJunk(t *testing.T, where string) {
	t.Helper()
	body := b.text(t, "body")
	for _, junk := range []string{"undefined", "NaN", "[object"} {
		if strings.Contains(body, junk) {
			t.Errorf("%s: the page shows %q:\n%s", where, junk, body)
		}
	}
	open, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.getElementById('dialog').open`))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if open {
		d := b.text(t, "#dialog")
		for _, junk := range []string{"false", "null", "true"} {
			for _, w := range strings.Fields(d) {
				if w == junk {
					t.Errorf("%s: the dialog shows a stray %q:\n%s", where, junk, d)
				}
			}
		}
	}
}

// count returns how many elements match the CSS selector sel.
func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	nodes, err := chromedp.Run(b.ctx, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0)))
	if err != nil {
		t.Fatalf("nodes %s: %v", sel, err)
	}
	return len(nodes)
}

// attr returns attribute name of the first element matching sel.
func (b *browser) attr(t *testing.T, sel, name string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil {
		t.Fatalf("attribute %s of %s: %v", name, sel, err)
	}
	return v.Value
}

func (b *browser) problemList() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// checkClean fails the test if the page logged an error, threw, or sent a
// request anywhere but origin.
func (b *browser) checkClean(t *testing.T, origin string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		// A 401 answered to the login page's wrong token is expected
		// and logged by the browser as a failed load.
		if strings.Contains(p, "401") && strings.Contains(p, "/ui/login") {
			continue
		}
		t.Errorf("browser reported: %s", p)
	}
	if len(b.requests) == 0 {
		t.Error("no request was recorded: the network listener is not working")
	}
	for _, u := range b.requests {
		if !strings.HasPrefix(u, origin+"/") && !strings.HasPrefix(u, "data:") {
			t.Errorf("the dashboard requested %s, outside its origin %s", u, origin)
		}
	}
}

// demo is a server with a worker running a small, realistic workload:
// completed jobs, retried ones, dead jobs in three groups, a job
// scheduled for later and one waiting out a rate limit.
type demo struct {
	*env
	worker *redrive.Worker
	// fixed makes the webhook handler succeed from now on.
	fixed atomic.Bool
	// ids of the dead jobs by kind.
	dead map[string][]int64
	// later is the job enqueued to run in an hour; limited the one whose
	// first attempt was answered 429 with a Retry-After of 30 minutes.
	later, limited int64
}

func startDemo(t *testing.T, token string) *demo {
	t.Helper()
	return startDemoWith(t, Options{Token: token})
}

// startDemoWith is startDemo on a server with options opts.
func startDemoWith(t *testing.T, opts Options) *demo {
	t.Helper()
	d := &demo{dead: map[string][]int64{}}
	d.env = newEnv(t, opts)
	fast := retry.Policy{MaxRetries: 2, Initial: 5 * time.Millisecond, Multiplier: 2, MaxDelay: 20 * time.Millisecond}
	w := redrive.NewWorker(d.client, redrive.WorkerOptions{
		Queues: map[string]int{"default": 4, "payments": 2, "webhooks": 4},
		Logger: quiet, Policy: &fast, PollInterval: 50 * time.Millisecond, DisableRetryBudget: true,
	})
	d.worker = w
	w.HandleFunc("email.send", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt == 1 && j.ID%3 == 0 {
			return redrive.Transient(errors.New("smtp: 421 try again later"))
		}
		return nil
	})
	w.HandleFunc("charge", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ Card string }
		_ = json.Unmarshal(j.Payload, &p)
		if p.Card == "tok_valid" {
			return nil
		}
		return redrive.Permanent(fmt.Errorf("card %s declined: insufficient funds", p.Card))
	})
	w.HandleFunc("webhook.deliver", func(ctx context.Context, j *redrive.Job) error {
		if d.fixed.Load() {
			redrive.Record(ctx, "http_202", `202 Accepted: {"received":true}`)
			return nil
		}
		return fmt.Errorf("POST https://hooks.example.com/orders: 503 Service Unavailable")
	})
	w.HandleFunc("report.build", func(ctx context.Context, j *redrive.Job) error {
		return redrive.NeedsAuth(errors.New("s3: 403 Forbidden: the access key expired"))
	})
	w.HandleFunc("crm.sync", func(ctx context.Context, j *redrive.Job) error {
		return &failure.StatusError{Code: 429, Status: "429 Too Many Requests", RetryAfter: 30 * time.Minute}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	// The statistics history starts with the worker's first snapshot;
	// the workload comes after it, so the charts count all of it.
	testwait.Until(t, "the worker's first statistics snapshot", 10*time.Second, func() bool {
		snaps, err := d.client.Store().Snapshots(context.Background(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return len(snaps) > 0
	})
	var reqs []redrive.Request
	for i := range 12 {
		reqs = append(reqs, redrive.Request{Kind: "email.send", Payload: map[string]any{"to": fmt.Sprintf("user%d@example.com", i), "template": "welcome"}})
	}
	for i := range 4 {
		reqs = append(reqs, redrive.Request{Kind: "charge", Payload: map[string]any{"card": fmt.Sprintf("tok_%d", 4000+i), "amount": 1299 + i, "currency": "eur"}, Queue: "payments"})
	}
	for i := range 3 {
		reqs = append(reqs, redrive.Request{Kind: "webhook.deliver", Payload: map[string]any{"url": "https://hooks.example.com/orders", "order": 1000 + i}, Queue: "webhooks"})
	}
	reqs = append(reqs, redrive.Request{Kind: "report.build", Payload: map[string]any{"month": "2026-10"}})
	reqs = append(reqs, redrive.Request{Kind: "email.send", Payload: map[string]any{"to": "later@example.com"}, Delay: time.Hour, Priority: 5})
	reqs = append(reqs, redrive.Request{Kind: "crm.sync", Payload: map[string]any{"contact": 77}})
	jobs, err := d.client.EnqueueMany(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	d.later, d.limited = jobs[len(jobs)-2].ID, jobs[len(jobs)-1].ID
	// Wait for the workload to settle: 8 dead, 12 completed, 2 scheduled
	// (the one for later, the rate-limited one).
	testwait.Watch(t, "the demo workload to settle (8 dead, 12 completed, 2 scheduled)", 30*time.Second, func() (bool, string) {
		st, err := d.client.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var dead, completed, scheduled int64
		for _, byState := range st.Jobs {
			dead += byState[redrive.Dead]
			completed += byState[redrive.Completed]
			scheduled += byState[redrive.Scheduled]
		}
		return dead == 8 && completed == 12 && scheduled == 2,
			fmt.Sprintf("%d dead, %d completed, %d scheduled", dead, completed, scheduled)
	})
	res, err := d.client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}}, redrive.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		d.dead[j.Kind] = append(d.dead[j.Kind], j.ID)
	}
	return d
}

func (d *demo) job(t *testing.T, id int64) *redrive.Job {
	t.Helper()
	j, err := d.client.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitState waits until job id is in state want.
func (d *demo) waitState(t *testing.T, id int64, want redrive.State) *redrive.Job {
	t.Helper()
	var j *redrive.Job
	testwait.Watch(t, fmt.Sprintf("job %d to be %s", id, want), 20*time.Second, func() (bool, string) {
		j = d.job(t, id)
		return j.State == want, string(j.State)
	})
	return j
}

func queuePaused(qs []redrive.Queue, name string) bool {
	for _, q := range qs {
		if q.Name == name {
			return q.Paused
		}
	}
	return false
}

// TestDashboardInChromium signs in, loads every page, and operates the
// DLQ by clicking: redrive a selected dead job, edit a payload and
// redrive, purge a group. Each action is checked in the store.
func TestDashboardInChromium(t *testing.T) {
	d := startDemo(t, "s3cret-token")
	b := newBrowser(t)
	url := d.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// Sign in: a wrong token is refused, the right one opens the overview.
	b.run(t, "wrong token",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), "wrong"),
		chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`.error`)))
	if msg := b.text(t, `.error`); !strings.Contains(msg, "not valid") {
		t.Errorf("wrong token: page says %q", msg)
	}
	b.run(t, "sign in",
		chromedp.SendKeys(css(`#token`), "s3cret-token"),
		chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`.tiles`)),
		chromedp.WaitVisible(css(`#queues table`)))
	if dead, completed := b.text(t, `a[data-state="dead"] .n`), b.text(t, `a[data-state="completed"] .n`); dead != "8" || completed != "12" {
		t.Errorf("overview tiles: dead %q completed %q, want 8 and 12", dead, completed)
	}
	b.noJunk(t, "overview")
	if n := b.count(t, `#queues tbody tr`); n != 3 {
		t.Errorf("queues table has %d rows, want 3 (default, payments, webhooks)", n)
	}
	// The charts count the whole workload: 12 completions, 8 dead; the
	// failure classes of the attempts that failed.
	for sel, want := range map[string]string{
		`#chart-outcomes [data-total="succeeded"]`: "completed 12",
		`#chart-outcomes [data-total="dead"]`:      "dead 8",
		`#chart-classes [data-total="permanent"]`:  "permanent 4",
		`#chart-classes [data-total="needs_auth"]`: "needs auth 1",
	} {
		if got := b.text(t, sel); got != want {
			t.Errorf("chart legend %s: %q, want %q", sel, got, want)
		}
	}
	if n := b.count(t, `#chart-outcomes rect[data-series="succeeded"]`); n == 0 {
		t.Error("the outcomes chart draws no completion bar")
	}

	// Pause a queue by clicking, then resume it.
	b.run(t, "pause queue",
		chromedp.Click(css(`tr[data-queue="payments"] button[data-action="pause"]`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(`tr[data-queue="payments"] .b-paused`)))
	if qs, err := d.client.Queues(context.Background()); err != nil || !queuePaused(qs, "payments") {
		t.Errorf("after clicking pause: %+v, %v", qs, err)
	}
	b.run(t, "resume queue",
		chromedp.Click(css(`tr[data-queue="payments"] button[data-action="resume"]`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(`tr[data-queue="payments"] button[data-action="pause"]`)))
	if qs, err := d.client.Queues(context.Background()); err != nil || queuePaused(qs, "payments") {
		t.Errorf("after clicking resume: %+v, %v", qs, err)
	}

	// Jobs: the table lists every job; a state filter narrows it.
	b.run(t, "jobs page",
		chromedp.Navigate(url+"/#/jobs"),
		chromedp.WaitVisible(css(`table.jobs tbody tr`)))
	b.noJunk(t, "jobs")
	if n := b.count(t, `table.jobs tbody tr`); n != 22 {
		t.Errorf("jobs table has %d rows, want 22", n)
	}
	// The When column says when a waiting job runs, and when a finished
	// one ended: not when it was created.
	when := func(id int64) string { return b.textNow(t, fmt.Sprintf(`tr[data-job="%d"] td.when`, id)) }
	if w := when(d.limited); w != "runs in 30m" && w != "runs in 29m" {
		t.Errorf("When of the job retried in 30 minutes: %q, want \"runs in 30m\"", w)
	}
	// An hour less the time the test has taken so far (over a minute
	// on a loaded machine).
	inAnHour := regexp.MustCompile(`in (1h|5\dm)\b`)
	if w := when(d.later); !strings.HasPrefix(w, "runs ") || !inAnHour.MatchString(w) {
		t.Errorf("When of the job scheduled in an hour: %q, want \"runs in 1h\" (or 5xm)", w)
	}
	if w := when(d.dead["charge"][0]); !strings.HasPrefix(w, "died ") || !strings.HasSuffix(w, " ago") {
		t.Errorf("When of a dead job: %q, want \"died … ago\"", w)
	}
	if w := b.textNow(t, `table.jobs tbody tr:has(.b-completed) td.when`); !strings.HasPrefix(w, "finished ") || !strings.HasSuffix(w, " ago") {
		t.Errorf("When of a completed job: %q, want \"finished … ago\"", w)
	}

	// The page of a job waiting out a rate limit says when it runs next,
	// and why then: the failure and the delay the policy chose.
	b.runWithin(t, 5*time.Second, "rate-limited job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, d.limited)),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"] #next-run`, d.limited))))
	b.noJunk(t, "rate-limited job page")
	if next := b.textNow(t, `#next-run`); !strings.Contains(next, "(in 30m)") && !strings.Contains(next, "(in 29m)") {
		t.Errorf("next run of the rate-limited job: %q, want it in 30m", next)
	}
	if why := b.textNow(t, `#why-then`); !strings.Contains(why, "attempt 1 failed") || !strings.Contains(why, "rate_limited") ||
		!strings.Contains(why, "http_429") || !(strings.Contains(why, "policy chose a delay of 30m00s") || strings.Contains(why, "policy chose a delay of 30m01s")) {
		// 30 min asked by Retry-After, plus up to 1 s of jitter.
		t.Errorf("why the rate-limited job runs then: %q, want the 429's class, reason and the 30m delay", why)
	}
	b.runWithin(t, 5*time.Second, "scheduled job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, d.later)),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"] #next-run`, d.later))))
	if why := b.textNow(t, `#why-then`); !strings.Contains(why, "scheduled when enqueued") {
		t.Errorf("why the job for later runs then: %q", why)
	}
	if p := b.textNow(t, `#priority`); !strings.HasPrefix(p, "5 ") {
		t.Errorf("priority of the job for later (5): %q", p)
	}
	if next := b.textNow(t, `#next-run`); !regexp.MustCompile(`\(in (1h|5\dm)\)`).MatchString(next) {
		t.Errorf("next run of the job for later: %q, want it in 1h", next)
	}

	b.run(t, "jobs page again",
		chromedp.Navigate(url+"/#/jobs"),
		chromedp.WaitVisible(css(`table.jobs tbody tr`)))
	b.run(t, "jobs filter",
		chromedp.SetValue(css(`select[name="state"]`), "dead"),
		chromedp.Click(css(`form.filters button[type="submit"]`)),
		chromedp.WaitReady(css(`select[name="state"] option[value="dead"][selected]`)))
	if n := b.count(t, `table.jobs tbody tr`); n != 8 {
		t.Errorf("dead jobs in the table: %d, want 8", n)
	}

	// Job page, opened by its id from the jobs page: the webhook job's
	// timeline shows its three attempts.
	hook := d.dead["webhook.deliver"][0]
	b.run(t, "job page",
		chromedp.SendKeys(css(`#goto-job`), fmt.Sprint(hook)),
		chromedp.Click(css(`form.goto button`)),
		chromedp.WaitVisible(css(`.timeline`)))
	if h1 := b.text(t, "h1"); !strings.HasPrefix(h1, fmt.Sprintf("Job %d", hook)) {
		t.Errorf("opened by id: the page is %q", h1)
	}
	b.noJunk(t, "job page")
	if n := b.count(t, `.timeline li`); n != 3 {
		t.Errorf("timeline of job %d has %d events, want 3 (retry, retry, dead)", hook, n)
	}
	if p := b.text(t, `#payload`); !strings.Contains(p, "hooks.example.com") {
		t.Errorf("payload shown: %q", p)
	}

	// DLQ: three groups (charge, webhook, report; emails completed).
	b.run(t, "dlq page",
		chromedp.Navigate(url+"/#/dlq"),
		chromedp.WaitVisible(css(`table.groups`)))
	b.noJunk(t, "dlq")
	if n := b.count(t, `table.groups tbody tr`); n != 3 {
		t.Errorf("dlq groups: %d, want 3", n)
	}

	// Redrive one webhook job by clicking, after the endpoint is fixed.
	d.fixed.Store(true)
	hookJob := d.job(t, hook)
	b.run(t, "redrive selected",
		chromedp.Click(css(fmt.Sprintf(`tr[data-group="%s"] td`, hookJob.Fingerprint))),
		chromedp.WaitVisible(css(fmt.Sprintf(`input[data-select="%d"]`, hook))),
		chromedp.Click(css(fmt.Sprintf(`input[data-select="%d"]`, hook))),
		chromedp.Click(css(`#redrive-selected`)),
		chromedp.WaitVisible(css(`#confirm`)))
	b.noJunk(t, "redrive dialog")
	b.run(t, "confirm redrive",
		chromedp.SendKeys(css(`#note`), "endpoint fixed"),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)))
	b.noJunk(t, "redrive progress")
	if p := b.text(t, `#progress-text`); !strings.Contains(p, "1 of 1 redriven") {
		t.Errorf("redrive progress says %q", p)
	}
	b.run(t, "close", chromedp.Click(css(`#close`)))
	j := d.waitState(t, hook, redrive.Completed)
	if n := len(j.History); n < 2 || j.History[n-2].Kind != "redriven" || !strings.Contains(j.History[n-2].Note, "endpoint fixed") ||
		j.History[n-1].Kind != "completed" {
		t.Errorf("history %+v, want the redrive with its note, then the recorded completion", j.History)
	}
	// Its page now tells the whole story: three failed attempts, the
	// redrive, and the attempt that completed it.
	b.run(t, "completed job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, hook)),
		chromedp.WaitVisible(css(`.timeline li[data-event="completed"]`)))
	if n := b.count(t, `.timeline li`); n != 5 {
		t.Errorf("timeline of the redriven job has %d entries, want 5 (retry, retry, dead, redriven, completed)", n)
	}
	// Its last error is the failure it got past, not a current one.
	if dl := b.textNow(t, `dl.kv`); !strings.Contains(dl, "Failed before success") || strings.Contains(dl, "Last error") {
		t.Errorf("the completed job's facts: %q, want its last error labelled \"Failed before success\"", dl)
	}
	if e := b.textNow(t, `#last-error`); !strings.Contains(e, "503 Service Unavailable") {
		t.Errorf("the completed job's earlier failure: %q", e)
	}
	if done := b.text(t, `.timeline li[data-event="completed"] .when`); !strings.Contains(done, "ran ") {
		t.Errorf("the completing attempt shows no duration: %q", done)
	}
	// The handler recorded its result: shown once, with the reason and note.
	if done := b.text(t, `.timeline li[data-event="completed"]`); !strings.Contains(done, "http_202") ||
		!strings.Contains(done, `202 Accepted: {"received":true}`) {
		t.Errorf("the completing attempt shows %q, want the recorded reason and note", done)
	}
	for _, id := range d.dead["webhook.deliver"][1:] {
		if s := d.job(t, id).State; s != redrive.Dead {
			t.Errorf("job %d was not selected but is %s", id, s)
		}
	}

	// Edit and redrive one charge with a valid card; malformed JSON is
	// caught before anything is sent.
	charge := d.dead["charge"][0]
	b.run(t, "edit and redrive",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, charge)),
		chromedp.WaitVisible(css(`#edit-redrive-job`)),
		chromedp.Click(css(`#edit-redrive-job`)),
		chromedp.WaitVisible(css(`#payload-editor`)),
		chromedp.SetValue(css(`#payload-editor`), `{"card": "tok_valid", "amount": 1299, "currency": "eur"`),
		chromedp.Click(css(`#next`)),
		chromedp.WaitVisible(css(`dialog .error`)))
	if msg := b.text(t, `dialog .error`); !strings.Contains(msg, "Not valid JSON") {
		t.Errorf("malformed payload: dialog says %q", msg)
	}
	b.run(t, "edit and redrive, fixed",
		chromedp.SetValue(css(`#payload-editor`), `{"card": "tok_valid", "amount": 1299, "currency": "eur"}`),
		chromedp.Click(css(`#next`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)),
		chromedp.Click(css(`#close`)))
	j = d.waitState(t, charge, redrive.Completed)
	if !strings.Contains(string(j.Payload), "tok_valid") {
		t.Errorf("payload after edit: %s", j.Payload)
	}

	// Purge the rest of the charge group.
	chargeFP := j.Fingerprint
	b.run(t, "purge group",
		chromedp.Navigate(url+"/#/dlq/"+chargeFP),
		chromedp.WaitVisible(css(`#purge-group`)),
		chromedp.Click(css(`#purge-group`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)))
	if p := b.text(t, `#progress-text`); !strings.Contains(p, "3 purged") {
		t.Errorf("purge progress says %q", p)
	}
	b.run(t, "close", chromedp.Click(css(`#close`)), chromedp.WaitVisible(css(`.empty`)))
	n, err := d.client.Count(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Fingerprint: chargeFP})
	if err != nil || n != 0 {
		t.Errorf("charge group after purge: %d jobs, %v", n, err)
	}

	// Workers: the demo's worker is live; a worker on another host that
	// stopped sending heartbeats ten minutes ago is marked stale; one that
	// stopped cleanly is listed as stopped.
	ctx := context.Background()
	now := time.Now()
	for _, w := range []redrive.WorkerInfo{
		{ID: "w-hung", Host: "batch-7", PID: 4242, Instance: "elsewhere", Version: "v0.9.0", Queues: map[string]int{"reports": 2},
			Kinds: []string{"report.build", "report.mail"}, StartedAt: now.Add(-2 * time.Hour), HeartbeatAt: now.Add(-10 * time.Minute)},
		{ID: "w-done", Host: "batch-8", PID: 4343, Instance: "elsewhere", Version: "v0.9.0", Queues: map[string]int{"default": 1},
			StartedAt: now.Add(-3 * time.Hour), HeartbeatAt: now.Add(-time.Hour)},
		// A worker in another language, on the worker protocol.
		{ID: "py-77@scan-1", Host: "scan-1", PID: 77, Version: redrive.RemoteVersion, Queues: map[string]int{"scan": 8},
			Kinds: []string{"scan.pdf"}, StartedAt: now.Add(-time.Minute), HeartbeatAt: now},
	} {
		if err := d.st.RegisterWorker(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.st.StopWorker(ctx, "w-done", now.Add(-time.Hour), "stopped"); err != nil {
		t.Fatal(err)
	}
	b.run(t, "overview", chromedp.Navigate(url+"/"), chromedp.WaitVisible(css(`.tiles`)))
	if b.count(t, `a[data-nav="workers"]`) == 0 {
		t.Fatal("the dashboard has no Workers tab")
	}
	b.runWithin(t, 5*time.Second, "workers page",
		chromedp.Click(css(`a[data-nav="workers"]`)),
		chromedp.WaitVisible(css(`table.workers`)))
	b.noJunk(t, "workers")
	if n := b.count(t, `table.workers tbody tr`); n != 4 {
		t.Errorf("workers table has %d rows, want 4", n)
	}
	// The remote worker has its badge; the Go workers have none.
	if got := b.textNow(t, `table.workers tr[data-worker="py-77@scan-1"] .badge.b-remote`); got != "remote" {
		t.Errorf("the remote worker's badge: %q, want \"remote\"", got)
	}
	if n := b.count(t, `table.workers .badge.b-remote`); n != 1 {
		t.Errorf("%d remote badges, want 1 (the remote worker's)", n)
	}
	live := b.text(t, `table.workers tr[data-state="live"]`)
	host, _ := os.Hostname()
	for _, want := range []string{d.worker.ID(), host, "default × 4", "payments × 2", "webhooks × 4", "0 of 10", "webhook.deliver"} {
		if !strings.Contains(live, want) {
			t.Errorf("the live worker's row %q lacks %q", live, want)
		}
	}
	if strings.Contains(live, "stale") {
		t.Errorf("the live worker is marked stale: %q", live)
	}
	if hung := b.text(t, `table.workers tr[data-worker="w-hung"]`); !strings.Contains(hung, "silent") ||
		!strings.Contains(hung, "stale: no heartbeat for 10m") || !strings.Contains(hung, "batch-7") || !strings.Contains(hung, "reports × 2") ||
		!strings.Contains(hung, "report.build, report.mail") {
		t.Errorf("the hung worker's row: %q, want it silent and stale for 10m", hung)
	}
	if done := b.text(t, `table.workers tr[data-worker="w-done"]`); !strings.Contains(done, "stopped 1h ago") || strings.Contains(done, "stale") ||
		!strings.Contains(done, "any (not recorded)") {
		t.Errorf("the stopped worker's row: %q", done)
	}

	// Signing out brings back the login form.
	b.run(t, "sign out",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(`#logout button`)),
		chromedp.Click(css(`#logout button`)),
		chromedp.WaitVisible(css(`#token`)))

	b.checkClean(t, url)
}

// TestDashboardScreenshots writes a PNG of each page of the dashboard to
// the folder named by REDRIVE_SCREENSHOTS (docs/images in the repository).
// It runs only when that variable is set, against a demo workload, or
// against the server at REDRIVE_SCREENSHOT_SERVER (token in
// REDRIVE_SCREENSHOT_TOKEN).
func TestDashboardScreenshots(t *testing.T) {
	dir := os.Getenv("REDRIVE_SCREENSHOTS")
	if dir == "" {
		t.Skip("REDRIVE_SCREENSHOTS not set")
	}
	url, token := os.Getenv("REDRIVE_SCREENSHOT_SERVER"), os.Getenv("REDRIVE_SCREENSHOT_TOKEN")
	if url == "" {
		d := startDemo(t, "")
		url = d.srv.URL
	}
	b := newBrowser(t)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	if token != "" {
		b.run(t, "sign in",
			chromedp.Navigate(url+"/"),
			chromedp.WaitVisible(css(`#token`)),
			chromedp.SendKeys(css(`#token`), token),
			chromedp.Submit(css(`#token`)),
			chromedp.WaitVisible(css(`.tiles`)))
	}
	shot := func(name, hash, ready string, extra ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		steps := append([]chromedp.Action[chromedp.Void]{
			chromedp.EmulateViewport(1280, 860),
			chromedp.Navigate(url + "/" + hash),
			chromedp.WaitVisible(css(ready)),
			chromedp.Sleep(300 * time.Millisecond),
		}, extra...)
		b.run(t, name, steps...)
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot("dashboard-overview", "#/", "#queues table")
	shot("dashboard-jobs", "#/jobs", "table.jobs")
	shot("dashboard-dlq", "#/dlq", "table.groups")
	group := b.attr(t, `table.groups tbody tr`, "data-group")
	shot("dashboard-dlq-group", "#/dlq/"+group, "#redrive-group")
	// The job page shows off its timeline best with a job that was
	// retried: the one with the most attempts among those whose last
	// error was transient.
	b.run(t, "retried jobs", chromedp.Navigate(url+"/#/jobs?class=transient"), chromedp.WaitVisible(css(`table.jobs`)))
	job, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => {
		let best = null, most = 0;
		for (const r of document.querySelectorAll('table.jobs tbody tr')) {
			const n = Number(r.children[4].textContent);
			if (n > most) { most = n; best = r.dataset.job; }
		}
		return best || document.querySelector('table.jobs tbody tr').dataset.job;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	shot("dashboard-job", "#/jobs/"+job, ".timeline")
	shot("dashboard-workers", "#/workers", "table.workers")
	shot("dashboard-redrive", "#/dlq/"+group, "#redrive-group",
		chromedp.Click(css(`#redrive-group`)), chromedp.WaitVisible(css(`#confirm`)))
}
