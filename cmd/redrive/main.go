// Command redrive is redrive's one binary: the server (`redrive serve`:
// the engine, the dashboard, the REST API and metrics) and the operator's
// CLI on a redrive database or, with --server, on a running server.
//
// Every subcommand lives in its own files and is added to the root
// command in newRootCmd. serve's settings (flags, REDRIVE_* variables,
// the config file) are package internal/config; serve's wiring is
// serve*.go. Global flags:
//
//	--db FILE   the SQLite database (default redrive.db)
//	--json      write JSON instead of text
//
// Subcommands write their output to cmd.OutOrStdout() and return errors;
// main prints them on standard error and exits with status 1.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
