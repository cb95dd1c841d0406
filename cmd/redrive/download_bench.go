package main

import (
	"context"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/bench"
)

// newBenchDownloadCmd is `redrive bench download`: the download kind
// against curl on the same local files.
func newBenchDownloadCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.DownloadParams{Files: bench.DefaultDownloadFiles, Size: bench.DefaultDownloadSize,
		Concurrency: bench.DefaultDownloadConcurrency, Curl: bench.DefaultCurl}
	var inProcess bool
	cmd := &cobra.Command{
		Use:   "download",
		Short: "Download N generated files through the engine, then with curl: MiB/s and CPU per GiB",
		Long: `Serve --files generated files of --size bytes each from a local HTTP server
(a child process, this binary re-executed, so that its CPU is nobody's; the
files are generated as they are sent, never stored), then:

  engine  enqueue one download job per file on a fresh SQLite store and run
          a worker with the download kind, --concurrency jobs at once, until
          every job is completed (files written to a temporary file, fsynced,
          renamed);
  curl    run ` + "`curl -s -o FILE URL`" + ` for the same files, --concurrency
          processes at once.

Each side writes into a fresh directory under --dir (default: the system's
temporary directory), deleted afterwards. Reported per side: wall time,
MiB/s, and CPU seconds per GiB: this process's (getrusage) for the engine,
the curl processes' for curl. --verify checks every file's SHA-256 after
each side, untimed. The shared --workers flag is not used: --concurrency is
both sides'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case p.Files < 1:
				return flagErrorf(cmd, "--files must be at least 1, got %d", p.Files)
			case p.Size < 1:
				return flagErrorf(cmd, "--size must be at least 1, got %d", p.Size)
			case p.Concurrency < 1:
				return flagErrorf(cmd, "--concurrency must be at least 1, got %d", p.Concurrency)
			case o.databaseURL != "":
				return flagErrorf(cmd, "the download workload runs on SQLite only: leave out --database-url")
			}
			if !inProcess {
				p.ServerCmd = spawnFileServer
			}
			return o.run(cmd, g, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				return result(bench.Download(ctx, cfg, p))
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Files, "files", p.Files, "number of files")
	f.Int64Var(&p.Size, "size", p.Size, "size of each file in bytes")
	f.IntVar(&p.Concurrency, "concurrency", p.Concurrency, "files fetched at once, by each side")
	f.StringVar(&p.Curl, "curl", p.Curl, "the curl binary (- to skip the curl side)")
	f.StringVar(&p.Dir, "dir", "", "where the files are written (default: a temporary directory)")
	f.BoolVar(&p.Verify, "verify", false, "check every file's SHA-256 after each side (untimed)")
	f.BoolVar(&inProcess, "server-in-process", false, "run the file server in this process (its CPU then counts as the engine's)")
	return cmd
}

// spawnFileServer starts this very binary as `redrive bench fileserver`.
func spawnFileServer(ctx context.Context, args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"bench", "fileserver"}, args...)...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	return cmd, nil
}

// newBenchFileServerCmd is the hidden `redrive bench fileserver`: the
// download workload's file server, started by the benchmark.
func newBenchFileServerCmd() *cobra.Command {
	var (
		files      int
		size, rate int64
	)
	cmd := &cobra.Command{
		Use:    "fileserver",
		Short:  "The file server of the download benchmark (started by the benchmark)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ServeFiles(cmd.Context(), files, size, rate, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&files, "files", 1, "number of files")
	f.Int64Var(&size, "size", 0, "size of each file in bytes")
	f.Int64Var(&rate, "rate", 0, "bytes per second of each response (0: unpaced)")
	return cmd
}
