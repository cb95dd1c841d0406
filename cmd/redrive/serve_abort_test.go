package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestServeStartFailureClosesListener: when serve fails to start after it
// listens (the store opened, but the worker or a transport could not be
// built), runServe closes its listener before returning the error, as it
// does when the store cannot be opened; otherwise an in-process caller is
// left with a server answering 503 on the address and its goroutine.
func TestServeStartFailureClosesListener(t *testing.T) {
	cases := []struct {
		name    string
		wantErr string
	}{
		{name: "download", wantErr: "download:"},
		{name: "amqp", wantErr: "amqp:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := "127.0.0.1:" + freePort(t)
			cfg, err := loadConfig(t, nil, "--addr", addr, "--db", sqlitetest.Path(t),
				"--shutdown-timeout", "5s")
			if err != nil {
				t.Fatal(err)
			}
			switch tc.name {
			case "download":
				// A regular file where the download directory should be:
				// config checks it at load, download.Register finds it
				// changed at start.
				file := filepath.Join(t.TempDir(), "not-a-dir")
				if err := os.WriteFile(file, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				cfg.Download.Dir = file
			case "amqp":
				// A URL that amqp.Open refuses, past the config's check.
				cfg.AMQP.URL = "ftp://nowhere"
				cfg.AMQP.Queues = map[string]int{"abort-test": 1}
			}
			logs := &syncBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = runServe(ctx, cfg, logs, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("runServe = %v, want an error starting %q\n%s", err, tc.wantErr, logs)
			}
			conn, derr := net.DialTimeout("tcp", addr, 10*time.Second)
			if derr == nil {
				conn.Close()
				t.Fatalf("%s still accepts connections after runServe returned %q", addr, err)
			}
		})
	}
}
