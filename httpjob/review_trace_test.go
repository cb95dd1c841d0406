package httpjob_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/httpjob"
)

// TestAttemptSpanNoURLSecrets: an http job whose URL does not parse (one
// enqueued where the kind's validation does not run: by another program,
// or from a broker) fails its attempt, and the attempt's span says why;
// the URL's password and query, which the kind's errors show masked
// everywhere else, are not in the span (its status, its events, its
// attributes), which goes to whatever trace backend the program exports
// to; nor in the outcome's error, which the job keeps.
func TestAttemptSpanNoURLSecrets(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	exec := redrive.NewExecutor(redrive.ExecutorOptions{Logger: slog.New(slog.DiscardHandler), TracerProvider: tp, DisableRetryBudget: true})
	h := httpjob.New(httpjob.Options{})
	exec.HandleFunc(httpjob.Kind, h.Handle)
	urls := []string{
		"https://user:s3cret@example.com/a%zz?token=t0ken",
		"https://user:s3cret@exa mple.com/?token=t0ken",
	}
	for i, u := range urls {
		payload, _ := json.Marshal(httpjob.Payload{URL: u})
		o := exec.Execute(t.Context(), &redrive.Job{ID: int64(i + 1), Kind: httpjob.Kind, Queue: "q", Attempt: 1, Payload: payload})
		if o.Error == "" {
			t.Fatalf("URL %q: attempt outcome %v without an error, want it failed", u, o.Kind)
		}
		if strings.Contains(o.Error, "s3cret") || strings.Contains(o.Error, "t0ken") {
			t.Errorf("URL %q: the attempt's error shows a secret: %s", u, o.Error)
		}
	}
	spans := rec.Ended()
	if len(spans) < len(urls) {
		t.Fatalf("%d spans, want the %d attempts'", len(spans), len(urls))
	}
	for _, s := range spans {
		texts := []string{s.Status().Description}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				texts = append(texts, a.Value.String())
			}
		}
		for _, a := range s.Attributes() {
			texts = append(texts, a.Value.String())
		}
		for _, txt := range texts {
			if strings.Contains(txt, "s3cret") || strings.Contains(txt, "t0ken") {
				t.Errorf("span %q holds a secret of the URL: %q", s.Name(), txt)
			}
		}
	}
}
