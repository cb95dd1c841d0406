package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// TestJobPageTraceLinkInChromium: with a trace viewer's URL template,
// the job page links the trace id to the trace's page in the viewer.
func TestJobPageTraceLinkInChromium(t *testing.T) {
	const tmpl = "http://jaeger.example:16686/trace/{trace_id}?uiEmbed=v0&a=<b>"
	e := newEnv(t, Options{TraceURLTemplate: tmpl})
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
	id := span.SpanContext().TraceID().String()
	b.runWithin(t, time.Minute, "traced job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, j.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#trace-id a`)))
	if got := b.textNow(t, `#trace-id a`); got != id {
		t.Errorf("trace link's text %q, want %q", got, id)
	}
	href, target, rel := b.attr(t, `#trace-id a`, "href"), b.attr(t, `#trace-id a`, "target"), b.attr(t, `#trace-id a`, "rel")
	if want := strings.ReplaceAll(tmpl, "{trace_id}", id); href != want {
		t.Errorf("trace link to %q, want %q", href, want)
	}
	if target != "_blank" || rel != "noopener noreferrer" {
		t.Errorf("trace link target %q rel %q, want a new tab without opener or referrer", target, rel)
	}
	b.noJunk(t, "job page")
}

// TestTraceURLTemplateRefused: an unusable template links nothing (serve
// refuses it at start; the server logs it and goes on).
func TestTraceURLTemplateRefused(t *testing.T) {
	var buf bytes.Buffer
	e := newEnv(t, Options{TraceURLTemplate: "javascript:alert('{trace_id}')", Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := e.do("GET", "/", "")
	if !bytes.Contains(r.body, []byte(`<meta name="redrive-trace-url" content="">`)) {
		t.Errorf("page with a refused template: %s", r.body)
	}
	if !strings.Contains(buf.String(), "trace URL template is unusable") {
		t.Errorf("refused template not logged: %s", buf.String())
	}
}
