package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
)

// TestResultInChromium: a completed job's page shows the result its
// handler recorded, masked like the payload; a job without one has no
// result card.
func TestResultInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t)
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Logger: quiet, PollInterval: 20 * time.Millisecond})
	w.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		return redrive.SetResult(ctx, map[string]any{"pages": 3, "password": "hunter22"})
	})
	w.HandleFunc("plain", func(ctx context.Context, j *redrive.Job) error { return nil })
	scan, err := e.client.Enqueue(context.Background(), "scan", map[string]string{"doc": "a.pdf"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.client.Enqueue(context.Background(), "plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testwait.Until(t, "both jobs completed", time.Minute, func() bool {
		a, err1 := e.client.Get(context.Background(), scan.ID)
		c, err2 := e.client.Get(context.Background(), plain.ID)
		return err1 == nil && err2 == nil && a.State == redrive.Completed && c.State == redrive.Completed
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.runWithin(t, 10*time.Second, "job page with a result",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, scan.ID)),
		chromedp.WaitVisible(css(`#result`)))
	b.noJunk(t, "job page with a result")
	if got := b.textNow(t, `#result`); !strings.Contains(got, `"pages": 3`) || !strings.Contains(got, `"password": "•••"`) || strings.Contains(got, "hunter22") {
		t.Errorf("result shown: %q", got)
	}
	b.runWithin(t, 10*time.Second, "job page without a result",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, plain.ID)),
		chromedp.WaitVisible(css(`[data-job-page] .timeline`)))
	b.waitText(t, "h1", fmt.Sprintf("Job %d", plain.ID)) // the page of this job, not the previous one's
	if n := b.count(t, `#result`); n != 0 {
		t.Errorf("a job without a result shows %d result cards", n)
	}
}
