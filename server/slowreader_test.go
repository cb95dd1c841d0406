package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// messageHandler is a slog handler that passes each record's message to
// a channel (dropping them when nobody reads).
type messageHandler struct{ msgs chan string }

func (h messageHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h messageHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h messageHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h messageHandler) WithGroup(string) slog.Handler      { return h }

// TestExportSlowReaderCutOff: a client that asks for the NDJSON export
// and then reads nothing is cut off once WriteTimeout passes without
// progress, instead of holding the handler and its connection for good.
// Real time passing is what is tested: the deadline is short, the bound
// on waiting for the handler to give up generous.
func TestExportSlowReaderCutOff(t *testing.T) {
	msgs := make(chan string, 100)
	e := newEnv(t, Options{WriteTimeout: 200 * time.Millisecond, Logger: slog.New(messageHandler{msgs})})
	// Far more than the socket buffers hold: the writes block.
	e.buryMany("big", strings.Repeat("x", 50_000), 400)
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /v1/dlq/export?queue=big HTTP/1.1\r\nHost: %s\r\n\r\n", e.srv.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	// Read the status line only, then nothing.
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	bound := time.After(30 * time.Second)
	for {
		select {
		case m := <-msgs:
			if strings.HasPrefix(m, "export stopped") {
				return
			}
		case <-bound:
			t.Fatal("the export still writes to a client that reads nothing")
		}
	}
}

// TestWaitOutlastsWriteTimeout: an answer that waited for its operation
// (?wait=true) longer than the server's WriteTimeout still reaches the
// client. Real time passing is what is tested: the redrive is held by
// its rate to at least a second, the write timeout is 200 ms.
func TestWaitOutlastsWriteTimeout(t *testing.T) {
	st := openStore(t)
	e := newEnvOn(t, st, Options{WriteTimeout: 200 * time.Millisecond})
	e.srv.Close()
	srv := httptest.NewUnstartedServer(e.api)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	e.srv = srv
	e.runWorker()
	ids := e.buryMany("w", "boom", 3)
	b, _ := json.Marshal(map[string]any{"ids": ids, "rate": 2})
	req, err := http.NewRequest("POST", srv.URL+"/v1/dlq/redrive?wait=true", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	defer res.Body.Close()
	var ob operationBody
	if err := json.NewDecoder(res.Body).Decode(&ob); err != nil || res.StatusCode != 200 || ob.Operation.State != OperationDone {
		t.Fatalf("wait=true: %d %+v, %v", res.StatusCode, ob.Operation, err)
	}
}
