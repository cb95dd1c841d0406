package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/server"
)

// TestServeShutdownCancelsOperations: SIGTERM (the end of serve's
// context) cancels a running redrive operation cleanly: a request
// waiting on it gets its final state, serve stops without error, and
// what was redriven stays redriven while the rest stays dead.
func TestServeShutdownCancelsOperations(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "redrive.db")
	for range 3 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail") // serve works queue default only
	}
	bury(t, db, "mail")
	ids := deadIDs(t, db, "mail")

	cfg, err := loadConfig(t, nil, "--addr", "127.0.0.1:0", "--db", db, "--shutdown-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	addrC := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() { served <- runServe(ctx, cfg, logs, func(a net.Addr) { addrC <- a }) }()
	var base string
	select {
	case a := <-addrC:
		base = "http://" + a.String()
	case err := <-served:
		t.Fatalf("serve stopped: %v\n%s", err, logs)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start")
	}

	type answer struct {
		status int
		body   []byte
	}
	waited := make(chan answer, 1)
	go func() {
		code, b := callNoFatal("POST", base+"/v1/dlq/redrive?wait=true", fmt.Sprintf(`{"ids":[%d,%d,%d],"rate":0.1}`, ids[0], ids[1], ids[2]))
		waited <- answer{code, b}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; {
		var l struct {
			Operations []server.Operation `json:"operations"`
		}
		getJSON(t, base+"/v1/operations", "", &l)
		if len(l.Operations) == 1 && l.Operations[0].Processed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no operation under way: %+v", l.Operations)
		}
		time.Sleep(10 * time.Millisecond)
	}

	cancel() // what SIGTERM does
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	a := <-waited
	var ob struct {
		Operation server.Operation `json:"operation"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &ob) != nil {
		t.Fatalf("the waiting request: %d %s", a.status, a.body)
	}
	if op := ob.Operation; op.State != server.OperationCanceled || op.Redriven != 1 || !strings.Contains(op.Error, "shutting down") {
		t.Fatalf("operation at shutdown: %+v", op)
	}
	if !strings.Contains(logs.String(), `"state":"canceled"`) {
		t.Errorf("no log of the canceled operation:\n%s", logs)
	}
	if left := deadIDs(t, db, "mail"); len(left) != 2 {
		t.Fatalf("%d dead jobs left, want 2", len(left))
	}
}

// callNoFatal is call for goroutines other than the test's: it reports
// a transport error as status -1.
func callNoFatal(method, url, body string) (int, []byte) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return -1, []byte(err.Error())
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, []byte(err.Error())
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return -1, []byte(err.Error())
	}
	return res.StatusCode, b
}
