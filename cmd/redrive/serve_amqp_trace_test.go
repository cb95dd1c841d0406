package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
)

// exportedSpan is a span an OTLP request carried.
type exportedSpan struct {
	name, trace, id, parent string
	attrs                   map[string]string
}

// spanSink is an OTLP/HTTP trace receiver that keeps every span.
type spanSink struct {
	mu    sync.Mutex
	spans []exportedSpan
}

func (s *spanSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err == nil {
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					es := exportedSpan{name: sp.Name, trace: hex.EncodeToString(sp.TraceId), id: hex.EncodeToString(sp.SpanId),
						parent: hex.EncodeToString(sp.ParentSpanId), attrs: map[string]string{}}
					for _, kv := range sp.Attributes {
						es.attrs[kv.Key] = kv.Value.GetStringValue()
						if es.attrs[kv.Key] == "" {
							es.attrs[kv.Key] = fmt.Sprint(kv.Value.GetIntValue())
						}
					}
					s.spans = append(s.spans, es)
				}
			}
		}
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

// named returns the spans named name.
func (s *spanSink) named(name string) []exportedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []exportedSpan
	for _, sp := range s.spans {
		if sp.name == name {
			out = append(out, sp)
		}
	}
	return out
}

// TestServeTracesManagedQueue: messages published inside a span to a
// queue serve manages reach the Python consumer with the traceparent of
// their send span, through the delay queues too; its failure reports keep
// it, so serve's spans of the attempts it decided (exported by OTLP) are
// children of that send span, in its trace, with RabbitMQ's messaging
// attributes.
func TestServeTracesManagedQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	url := amqpTestURL(t)
	pika(t)
	bin := buildRedrive(t)
	sink := &spanSink{}
	collector := httptest.NewServer(sink)
	defer collector.Close()
	ctx := context.Background()
	conn, err := amqp.Dial(ctx, url, amqp.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := fmt.Sprintf("redrive-serve-trace-%d", time.Now().UnixNano())
	exchange := q + "-failures"
	t.Cleanup(func() { deleteManaged(conn, q, exchange) })
	dir := t.TempDir()
	args := []string{"--db", filepath.Join(dir, "redrive.db"), "--addr", "127.0.0.1:0", "--amqp-queues", q,
		"--amqp-failure-exchange", exchange, "--retry-base", "100ms", "--retry-max-retries", "1", "--retry-jitter", "none",
		"--queues", "default"}
	env := []string{"REDRIVE_TOKEN=trace-token", "REDRIVE_AMQP_URL=" + url, "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL,
		"OTEL_BSP_SCHEDULE_DELAY=20"}
	startRedrive(t, bin, env, args...)
	eventually(t, "serve declared the managed queue", func() bool { return queueExists(conn, q) && queueExists(conn, q+"-failed") })

	logPath := filepath.Join(dir, "deliveries.jsonl")
	py := exec.Command(systemPython, filepath.Join("testdata", "consumer.py"), url, q, exchange, logPath)
	var pyOut bytes.Buffer
	py.Stdout, py.Stderr = &pyOut, &pyOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		py.Process.Kill()
		py.Wait()
		if t.Failed() {
			t.Logf("consumer.py's output:\n%s", pyOut.String())
		}
	})

	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(ctx)
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// bad-: reported permanent through the failure exchange; dead-:
	// rejected twice, through a delay queue, then dead.
	sent := map[string]string{} // message id -> the traceparent it was sent with
	for _, id := range []string{"bad-t", "dead-t"} {
		rctx, request := tp.Tracer("test").Start(ctx, "request "+id)
		if _, err := pub.Enqueue(rctx, "doc", map[string]string{"id": id}, redrive.InQueue(q), redrive.IdempotencyKey(id)); err != nil {
			t.Fatal(err)
		}
		request.End()
		sent[id] = ""
	}
	eventually(t, "bad-t's and dead-t's attempts exported", func() bool {
		return len(sink.named("process "+q)) >= 3 && len(sink.named("dead_letter "+q)) >= 2
	})
	ds := readDeliveries(t, logPath)
	for id := range sent {
		if len(ds[id]) == 0 {
			t.Fatalf("%s was not delivered", id)
		}
		sent[id] = ds[id][0].Traceparent
		for i, d := range ds[id] {
			if d.Traceparent == "" || d.Traceparent != sent[id] {
				t.Errorf("%s delivery %d: traceparent %q, want the first's %q", id, i, d.Traceparent, sent[id])
			}
		}
	}
	if n := len(ds["dead-t"]); n != 2 {
		t.Errorf("dead-t: %d deliveries, want 2", n)
	}
	want := map[string]int{"bad-t": 1, "dead-t": 2}
	for _, s := range sink.named("process " + q) {
		id := s.attrs["messaging.message.id"]
		parts := strings.Split(sent[id], "-")
		if len(parts) != 4 {
			t.Errorf("span %s of message %q: no traceparent was sent (%q)", s.name, id, sent[id])
			continue
		}
		want[id]--
		if s.trace != parts[1] || s.parent != parts[2] {
			t.Errorf("%s's attempt span: trace %s parent %s, want a child of the send span %s in trace %s", id, s.trace, s.parent, parts[2], parts[1])
		}
		if s.attrs["messaging.system"] != "rabbitmq" || s.attrs["messaging.destination.name"] != q {
			t.Errorf("%s's attempt span attributes %v", id, s.attrs)
		}
	}
	for id, n := range want {
		if n != 0 {
			t.Errorf("%s: %d attempt spans missing or extra", id, n)
		}
	}
	for _, s := range sink.named("dead_letter " + q) {
		if id := s.attrs["messaging.message.id"]; !strings.Contains(sent[id], s.trace) {
			t.Errorf("%s's dead_letter span in trace %s, want its message's (%s)", id, s.trace, sent[id])
		}
	}
}
