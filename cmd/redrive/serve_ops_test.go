package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
)

// TestServeShutdownKeepsOperations: SIGTERM (the end of serve's context)
// stops serve cleanly midway through a redrive operation: a request
// waiting on it gets its state, the worker releases the operation where
// its last batch ended, and serve started again continues it at once:
// every job is redriven exactly once.
func TestServeShutdownKeepsOperations(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	for range 3 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail") // serve works queue default only
	}
	bury(t, db, "mail")
	ids := deadIDs(t, db, "mail")

	cfg, err := loadConfig(t, nil, "--addr", "127.0.0.1:0", "--db", db, "--shutdown-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	serve := func() (string, context.CancelFunc, chan error, *syncBuffer) {
		ctx, cancel := context.WithCancel(context.Background())
		logs := &syncBuffer{}
		addrC := make(chan net.Addr, 1)
		served := make(chan error, 1)
		go func() { served <- runServe(ctx, cfg, logs, func(a net.Addr) { addrC <- a }) }()
		select {
		case a := <-addrC:
			return "http://" + a.String(), cancel, served, logs
		case err := <-served:
			t.Fatalf("serve stopped: %v\n%s", err, logs)
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not start")
		}
		return "", cancel, served, logs
	}
	base, cancel, served, logs := serve()
	defer cancel()

	type answer struct {
		status int
		body   []byte
	}
	waited := make(chan answer, 1)
	go func() {
		// One job a second: the shutdown comes after the first.
		code, b := callNoFatal("POST", base+"/v1/dlq/redrive?wait=true", fmt.Sprintf(`{"ids":[%d,%d,%d],"rate":1}`, ids[0], ids[1], ids[2]))
		waited <- answer{code, b}
	}()
	waitUntil(t, e2eWait, "one operation under way, one job processed", func() error {
		var l struct {
			Operations []server.Operation `json:"operations"`
		}
		getJSON(t, base+"/v1/operations", "", &l)
		if len(l.Operations) == 1 && l.Operations[0].Processed == 1 {
			return nil
		}
		return fmt.Errorf("operations %+v", l.Operations)
	})

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
	op := ob.Operation
	if op.State != server.OperationRunning || op.Redriven < 1 || op.Redriven >= 3 {
		t.Fatalf("operation at shutdown: %+v", op)
	}
	if !strings.Contains(logs.String(), "operation released") {
		t.Errorf("no log of the released operation:\n%s", logs)
	}
	if left := deadIDs(t, db, "mail"); len(left) == 0 || len(left) == 3 {
		t.Fatalf("%d dead jobs left at shutdown, want some of the 3 redriven", len(left))
	}

	// Started again, serve continues the operation where it stopped.
	base, cancel2, served2, logs2 := serve()
	defer func() {
		cancel2()
		if err := <-served2; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	waitUntil(t, e2eWait, "the operation ended after the restart", func() error {
		getJSON(t, base+"/v1/operations/"+op.ID, "", &ob)
		if ob.Operation.State == server.OperationDone {
			return nil
		}
		return fmt.Errorf("%+v\n%s", ob.Operation, logs2)
	})
	if got := ob.Operation; got.Redriven != 3 || got.Processed != 3 {
		t.Fatalf("after the restart: %+v", got)
	}
	if left := deadIDs(t, db, "mail"); len(left) != 0 {
		t.Fatalf("%d dead jobs left, want 0", len(left))
	}
	for _, id := range ids {
		out := mustCLI(t, "--db", db, "--json", "jobs", "show", fmt.Sprint(id))
		var j struct {
			Redriven int `json:"redriven"`
		}
		if err := json.Unmarshal([]byte(out), &j); err != nil || j.Redriven != 1 {
			t.Fatalf("job %d redriven %d times (%v): %s", id, j.Redriven, err, out)
		}
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
