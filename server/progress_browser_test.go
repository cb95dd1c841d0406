package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
)

// waitText waits until the first element matching sel has a text that
// contains want, and returns that text.
func (b *browser) waitText(t *testing.T, sel, want string) string {
	t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); return el && el.innerText.includes(%q) ? el.innerText : ''; })()`, sel, want)
	v, err := chromedp.Run(b.ctx, chromedp.Poll[string](js,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		t.Fatalf("waiting for %s to show %q (it shows %q): %v\nbrowser problems: %v", sel, want, b.textNow(t, sel), err, b.problemList())
	}
	return v
}

// TestProgressInChromium follows a running job's progress on its page and
// in the jobs table: the bar shows what the handler reported, the page
// refreshes by itself while the job runs, and the completed job shows
// its final progress.
func TestProgressInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Logger: quiet, PollInterval: 20 * time.Millisecond,
		// Heartbeats, with the progress, every second. A 300 ms lease
		// was lost under -race in a full suite: the handler was stopped,
		// the job rescued and its progress cleared, and the page showed
		// none for the minute the test waits.
		LeaseDuration: 3 * time.Second})
	step, stop := make(chan struct{}), make(chan struct{})
	w.HandleFunc("download", func(ctx context.Context, j *redrive.Job) error {
		for _, mib := range []int64{3, 7} {
			redrive.Progress(ctx, mib<<20, 10<<20)
			select {
			case <-step:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		redrive.Progress(ctx, 10<<20, 10<<20)
		return nil
	})
	w.HandleFunc("count", func(ctx context.Context, j *redrive.Job) error {
		redrive.Progress(ctx, 1234, 0) // no total known
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := false
	t.Cleanup(func() {
		cancel()
		if !started {
			return
		}
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	job, err := e.client.Enqueue(context.Background(), "download", map[string]string{"url": "https://example.com/big.iso"})
	if err != nil {
		t.Fatal(err)
	}
	counted, err := e.client.Enqueue(context.Background(), "count", nil)
	if err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// The job's page, opened while the job still waits (the worker
	// starts only then), shows it start, then the bar with bytes, and
	// follows the handler's progress by itself. (CI opened it before the
	// worker leased the job, by chance: a waiting job's page did not
	// refresh, and the bar never came.)
	b.runWithin(t, 10*time.Second, "waiting job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, job.ID)),
		chromedp.WaitVisible(css(`[data-job-page]`)))
	started = true
	go func() { done <- w.Run(ctx) }()
	if got := b.waitText(t, `#progress`, "30% · 3.00 MiB of 10.0 MiB"); got == "" {
		t.Fatal("no progress")
	}
	if v := b.attr(t, `#progress progress`, "value"); v != fmt.Sprint(3<<20) {
		t.Errorf("bar value %q, want %d", v, 3<<20)
	}
	b.noJunk(t, "running job page")
	step <- struct{}{}
	b.waitText(t, `#progress`, "70% · 7.00 MiB of 10.0 MiB") // the page refreshed itself

	// The jobs table shows a small bar on the running job's row.
	b.runWithin(t, 10*time.Second, "jobs table",
		chromedp.Navigate(url+"/#/jobs?state=running"),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-job="%d"] .job-progress`, job.ID))))
	if got := b.textNow(t, fmt.Sprintf(`tr[data-job="%d"] .job-progress`, job.ID)); strings.TrimSpace(got) != "70%" {
		t.Errorf("jobs table progress %q, want 70%%", got)
	}
	b.noJunk(t, "jobs table")

	// Without a total, a count and an indeterminate bar.
	b.runWithin(t, 10*time.Second, "counting job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, counted.ID)),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"]`, counted.ID))))
	b.waitText(t, `#progress`, "1,234 done")
	if dt := b.textNow(t, `dl.kv dt:has(+ #progress)`); dt != "Progress" {
		t.Errorf("running job's progress is labelled %q, want Progress", dt)
	}
	if n := b.count(t, `#progress progress[value]`); n != 0 {
		t.Errorf("a bar without a total has a value")
	}

	// Released, the download completes; its page keeps the final progress.
	b.runWithin(t, 10*time.Second, "download page again",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, job.ID)),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"]`, job.ID))))
	step <- struct{}{} // the download's last step
	close(stop)
	b.waitText(t, `[data-job-page] h1`, "completed")
	b.waitText(t, `#progress`, "100% · 10.0 MiB of 10.0 MiB")
	if dt := b.textNow(t, `dl.kv dt:has(+ #progress)`); dt != "Final progress" {
		t.Errorf("completed job's progress is labelled %q, want Final progress", dt)
	}
	b.noJunk(t, "completed job page")
	b.checkClean(t, url)
}
