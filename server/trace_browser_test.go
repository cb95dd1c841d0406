package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redrivehq/redrive"
)

// TestJobPageTraceIDInChromium: the page of a job enqueued inside a
// trace shows the trace's id; a job enqueued outside any shows none.
func TestJobPageTraceIDInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	traced := redrive.NewClient(e.client.Store(), redrive.ClientOptions{TracerProvider: tp})
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	j, err := traced.Enqueue(ctx, "index", map[string]int{"doc": 1}, redrive.InQueue("tq"))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.client.Enqueue(context.Background(), "index", map[string]int{"doc": 2}, redrive.InQueue("tq"))
	if err != nil {
		t.Fatal(err)
	}
	b.runWithin(t, time.Minute, "traced job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, j.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#trace-id`)))
	if got, want := b.textNow(t, `#trace-id`), span.SpanContext().TraceID().String(); got != want {
		t.Errorf("trace id shown %q, want %q", got, want)
	}
	b.runWithin(t, time.Minute, "untraced job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, plain.ID)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-job-page="%d"]`, plain.ID))))
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#trace-id').length`)); err != nil || n != 0 {
		t.Errorf("untraced job page: %d trace ids shown (%v), want none", n, err)
	}
	b.noJunk(t, "job page")
}
