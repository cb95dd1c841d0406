package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestWorkflowsInChromium: the workflows list shows each workflow's
// state, policy and progress; a workflow's page draws its graph with
// each job's state, marks the dead job with its blocked dependents,
// lists the jobs with what they wait for, and cancels the workflow for
// an operator (the screenshot: a workflow with a dead job and
// its blocked dependents).
func TestWorkflowsInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	ctx := t.Context()
	now := time.Now().UTC()
	nj := func(kind string) store.NewJob {
		return store.NewJob{Queue: "etl", Kind: kind, Payload: []byte(`{}`), MaxRetries: -1}
	}
	cb := func(kind string) *store.NewJob { j := nj(kind); return &j }
	batch, err := e.st.EnqueueWorkflow(ctx, store.NewWorkflow{Name: "thumbnails", Jobs: []store.WorkflowNode{
		{Name: "small", Job: nj("thumb")}, {Name: "medium", Job: nj("thumb")}, {Name: "large", Job: nj("thumb")},
	}}, now)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := e.st.EnqueueWorkflow(ctx, store.NewWorkflow{Name: "nightly-report", OnDead: store.WaitOnDead,
		Jobs: []store.WorkflowNode{
			{Name: "extract", Job: nj("extract")},
			{Name: "transform", Job: nj("transform"), After: []string{"extract"}},
			{Name: "enrich", Job: nj("enrich"), After: []string{"extract"}},
			{Name: "load", Job: nj("load"), After: []string{"transform", "enrich"}},
			{Name: "publish", Job: nj("publish"), After: []string{"load"}},
		},
		OnSuccess: cb("notify"), OnDeath: cb("page-oncall"),
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, j := range wf.Jobs {
		ids[j.Name] = j.JobID
	}
	// finishAll leases every due job of etl and completes each, but for
	// the jobs of kind dies, which die.
	finishAll := func(dies string) {
		t.Helper()
		got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "etl", Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		var outs []store.Outcome
		for _, j := range got {
			o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete, At: now}
			if j.Kind == dies {
				o.Kind, o.Class, o.DeadReason, o.Fingerprint, o.Error = store.Bury, failure.Permanent, "permanent", "fp", "enrich: upstream 404"
			}
			outs = append(outs, o)
		}
		if _, err := e.st.Finish(ctx, outs); err != nil {
			t.Fatal(err)
		}
	}
	finishAll("")       // extract and the three thumbnails
	finishAll("enrich") // transform completes, enrich dies; the death callback fires
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	row := func(id int64) string { return `tr[data-workflow="` + strconv.FormatInt(id, 10) + `"]` }

	b.runWithin(t, 10*time.Second, "workflows page",
		chromedp.Navigate(url+"/#/workflows"),
		chromedp.WaitVisible(css(row(wf.ID))))
	if a := b.attr(t, `a[data-nav="workflows"]`, "class"); !strings.Contains(a, "active") {
		t.Errorf("the Workflows nav link is not active: %q", a)
	}
	if got := b.textNow(t, row(wf.ID)); !containsAll(got, "nightly-report", "active", "wait", "2 completed", "1 dead", "of 5") {
		t.Errorf("nightly-report row: %q", got)
	}
	if got := b.textNow(t, row(batch.ID)); !containsAll(got, "thumbnails", "succeeded", "3 completed", "of 3") {
		t.Errorf("thumbnails row: %q", got)
	}
	b.noJunk(t, "workflows page")

	node := func(name string) string { return `svg.wf-graph a[data-node="` + name + `"]` }
	b.runWithin(t, 10*time.Second, "workflow page",
		chromedp.Click(css(row(wf.ID))),
		chromedp.WaitVisible(css(node("publish"))))
	if n := b.count(t, "svg.wf-graph a.wf-node"); n != 5 {
		t.Errorf("the graph draws %d jobs, want 5", n)
	}
	if n := b.count(t, "svg.wf-graph path.wf-edge"); n != 5 {
		t.Errorf("the graph draws %d edges, want 5", n)
	}
	for name, st := range map[string]string{"extract": "completed", "transform": "completed", "enrich": "dead", "load": "blocked", "publish": "blocked"} {
		if got := b.attr(t, node(name), "data-state"); got != st {
			t.Errorf("graph: %s is %q, want %q", name, got, st)
		}
	}
	// An SVG element has no innerText.
	enrich, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('`+node("enrich")+`').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if got := enrich; !strings.Contains(got, "dead · 1 blocked") {
		t.Errorf("graph: enrich shows %q, want its one blocked dependent", got)
	}
	if got := b.textNow(t, `tr[data-node="load"]`); !containsAll(got, "load", "blocked", "transform, enrich") {
		t.Errorf("load row: %q", got)
	}
	if got := b.textNow(t, `tr[data-node="enrich"]`); !containsAll(got, "dead", "1 blocked") {
		t.Errorf("enrich row: %q", got)
	}
	if got := b.textNow(t, "#wf-policy"); !strings.Contains(got, "stay blocked until it is redriven") {
		t.Errorf("policy: %q", got)
	}
	if got := b.textNow(t, "#wf-counts"); !containsAll(got, "completed 2", "dead 1", "blocked 2") {
		t.Errorf("counts: %q", got)
	}
	if got := b.attr(t, "#cancel-workflow", "data-needs"); got != "operate" {
		t.Errorf("cancel button needs %q, want operate", got)
	}
	b.noJunk(t, "workflow page")
	screenshot(t, b, "dashboard-workflow", node("publish"))

	b.runWithin(t, 10*time.Second, "cancel",
		chromedp.Click(css("#cancel-workflow")),
		chromedp.WaitVisible(css("#confirm")))
	b.noJunk(t, "cancel dialog")
	b.runWithin(t, 10*time.Second, "confirm cancel",
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css(node("publish")+`[data-state="canceled"]`)))
	if got := b.textNow(t, "#wf-state"); !strings.Contains(got, "canceled") {
		t.Errorf("state after the cancel: %q", got)
	}
	if b.count(t, "#cancel-workflow") != 0 {
		t.Error("a canceled workflow still offers its cancel")
	}
	got, err := e.st.GetWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.WorkflowCanceled || got.Counts[store.Canceled] != 2 || got.Counts[store.Dead] != 1 {
		t.Errorf("after the cancel: %s, counts %v", got.State, got.Counts)
	}
	b.noJunk(t, "after the cancel")
	b.checkClean(t, url)
}

// containsAll reports whether s holds each of want.
func containsAll(s string, want ...string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
