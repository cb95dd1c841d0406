package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redrivehq/redrive/internal/testwait"
)

// otlpReceiver is a minimal OTLP/HTTP trace receiver: it decodes the
// protobuf requests and keeps the spans' names and trace ids.
type otlpReceiver struct {
	mu     sync.Mutex
	spans  map[string]string // name -> trace id (hex)
	errors []string
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		rc.errors = append(rc.errors, fmt.Sprintf("%s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
	} else if err := proto.Unmarshal(b, &req); err != nil {
		rc.errors = append(rc.errors, err.Error())
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans[s.Name] = hex.EncodeToString(s.TraceId)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

func (rc *otlpReceiver) span(name string) (string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id, ok := rc.spans[name]
	return id, ok
}

// TestServeExportsTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, serve
// exports the spans of a job enqueued through the API (its enqueue and
// its attempt, one trace) by OTLP/HTTP, and the http kind's request
// carries that trace's traceparent to its target.
func TestServeExportsTraces(t *testing.T) {
	rc := &otlpReceiver{spans: map[string]string{}}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: export at once
	traceparent := make(chan string, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case traceparent <- r.Header.Get("traceparent"):
		default:
		}
	}))
	defer target.Close()

	base, logs := startServe(t)
	code, b := call(t, "POST", base+"/v1/jobs", "", fmt.Sprintf(`{"kind":"http","payload":{"url":%q}}`, target.URL))
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", code, b)
	}
	var job struct {
		Trace string `json:"trace"`
	}
	if err := json.Unmarshal(b, &job); err != nil || job.Trace == "" {
		t.Fatalf("enqueued job %s has no trace context (%v)", b, err)
	}
	var sent string
	select {
	case sent = <-traceparent:
	case <-time.After(30 * time.Second): // liveness bound only
		t.Fatalf("the http job's request never came\n%s", logs)
	}
	testwait.Until(t, "the enqueue's and the attempt's spans exported", 30*time.Second, func() bool {
		_, a := rc.span("send default")
		_, b := rc.span("process default")
		return a && b
	})
	sendTrace, _ := rc.span("send default")
	processTrace, _ := rc.span("process default")
	if sendTrace != processTrace || !strings.Contains(job.Trace, sendTrace) {
		t.Errorf("send span in trace %s, process span in %s, job's trace context %q: want one trace", sendTrace, processTrace, job.Trace)
	}
	if !strings.HasPrefix(sent, "00-"+sendTrace+"-") {
		t.Errorf("the target got traceparent %q, want one in trace %s", sent, sendTrace)
	}
	// /metrics, scraped in the OpenMetrics format, shows the attempt's
	// trace as an exemplar of its duration.
	var exposition string
	defer func() {
		if t.Failed() {
			t.Logf("/metrics:\n%s", exposition)
		}
	}()
	testwait.Until(t, "the attempt's exemplar on /metrics", 30*time.Second, func() bool {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		exposition = string(body)
		return strings.Contains(exposition, `trace_id="`+sendTrace+`"`)
	})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.errors) > 0 {
		t.Errorf("receiver: %v", rc.errors)
	}
}
