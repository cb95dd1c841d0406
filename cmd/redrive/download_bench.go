package main

import (
	"context"
	"os"
	"os/exec"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/download"
)

// newBenchDownloadCmd is `redrive bench download`: the download kind
// against curl on the same local files, or, with --s3, against minio-go
// on the same objects of an S3-compatible store.
func newBenchDownloadCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.DownloadParams{Files: bench.DefaultDownloadFiles, Size: bench.DefaultDownloadSize,
		Concurrency: bench.DefaultDownloadConcurrency, Curl: bench.DefaultCurl, CurlMode: bench.CurlBoth}
	var (
		inProcess bool
		s3        bench.DownloadS3
	)
	cmd := &cobra.Command{
		Use:   "download",
		Short: "Download N generated files through the engine, then with curl (or minio-go): MiB/s and CPU per GiB",
		Long: `Serve --files generated files of --size bytes each from a local HTTP server
(a child process, this binary re-executed, so that its CPU is nobody's; the
files are generated as they are sent, never stored), then:

  engine        enqueue one download job per file on a fresh SQLite store
                and run a worker with the download kind, --concurrency jobs
                at once, until every job is completed (each file written to
                a temporary file, checkpointed, fsynced, renamed, and its
                directory fsynced);
  durable curl  run ` + "`curl -s -f -o FILE.part URL`" + ` for the same files,
                --concurrency processes at once; once each curl has exited,
                this process fsyncs FILE.part, renames it to FILE and fsyncs
                the directory (the engine's promise: a file under its final
                name is whole and on disk), within curl's wall time;
  curl          the same without the fsyncs and the rename: ` + "`curl -s -f -o FILE URL`" + `.

--curl-mode picks the curl sides: both (the default), durable or plain.

With --s3 ENDPOINT (e.g. http://127.0.0.1:9000), the files are put into a
bucket of that S3-compatible store first (untimed; a fresh bucket deleted
afterwards, or --s3-bucket, an existing one that keeps them for the next
run), then fetched:

  engine        as above, with s3://bucket/file-NNN.bin URLs and a source
                of that endpoint;
  minio-go      minio-go's FGetObject (a temporary file renamed when
                whole), --concurrency calls at once in this process, then
                an fsync of the file and of its directory.

Both sides sign with the credentials of AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (else the AWS_PROFILE, or default, profile of
~/.aws/credentials), never given on the command line. The store's CPU is
nobody's (a separate process).

Before each side the machine is sync(2)ed (untimed), so that no side waits
on the writeback of the one before. Each side writes into a fresh directory
under --dir (default: the system's temporary directory), deleted afterwards.
Reported per side: wall time, MiB/s, and CPU seconds per GiB: this
process's (getrusage) for the engine and minio-go, the curl processes' for
curl, plus, for durable curl, this process's fsyncs and renames (measured
on the thread that made them, reported apart too). --verify checks every
file's SHA-256 after each side, untimed. The shared --workers flag is not
used: --concurrency is both sides'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			switch {
			case p.Files < 1:
				return flagErrorf(cmd, "--files must be at least 1, got %d", p.Files)
			case p.Size < 1:
				return flagErrorf(cmd, "--size must be at least 1, got %d", p.Size)
			case p.Concurrency < 1:
				return flagErrorf(cmd, "--concurrency must be at least 1, got %d", p.Concurrency)
			case o.databaseURL != "":
				return flagErrorf(cmd, "the download workload runs on SQLite only: leave out --database-url")
			case p.CheckpointBytes < 0:
				return flagErrorf(cmd, "--checkpoint-bytes must not be negative, got %d", p.CheckpointBytes)
			case p.CurlMode != bench.CurlBoth && p.CurlMode != bench.CurlDurable && p.CurlMode != bench.CurlPlain:
				return flagErrorf(cmd, "--curl-mode must be both, durable or plain, got %q", p.CurlMode)
			}
			if s3.Endpoint == "" {
				for _, name := range []string{"s3-bucket", "s3-region"} {
					if fl.Changed(name) {
						return flagErrorf(cmd, "--%s needs --s3 (the store's endpoint)", name)
					}
				}
			} else {
				for _, name := range []string{"curl", "curl-mode", "server-in-process"} {
					if fl.Changed(name) {
						return flagErrorf(cmd, "--%s is for the http sides: with --s3 the other side is minio-go's FGetObject", name)
					}
				}
				if _, err := download.ParseS3Endpoint(s3.Endpoint); err != nil {
					return flagErrorf(cmd, "--s3: %v", err)
				}
				if s3.Bucket != "" {
					if _, _, err := download.ParseS3URL("s3://" + s3.Bucket + "/k"); err != nil {
						return flagErrorf(cmd, "--s3-bucket: %v", err)
					}
				}
				s3.Credentials = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
				if v, err := s3.Credentials.GetWithContext(nil); err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
					return flagErrorf(cmd, "--s3 needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, a profile of ~/.aws/credentials)")
				}
				p.S3 = &s3
			}
			if !inProcess && p.S3 == nil {
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
	f.StringVar(&p.Curl, "curl", p.Curl, "the curl binary (- to skip the curl sides)")
	f.StringVar(&p.CurlMode, "curl-mode", p.CurlMode, "the curl sides: both, durable (fsync, rename, directory fsync after each file) or plain")
	f.StringVar(&p.Dir, "dir", "", "where the files are written (default: a temporary directory)")
	f.Int64Var(&p.CheckpointBytes, "checkpoint-bytes", 0, "the engine's bytes between two checkpoints (fsync and sidecar; 0: the kind's default, 64 MiB)")
	f.BoolVar(&p.EngineLast, "engine-last", false, "run the other side (curl, minio-go) first and the engine last")
	f.BoolVar(&p.Verify, "verify", false, "check every file's SHA-256 after each side (untimed)")
	f.BoolVar(&inProcess, "server-in-process", false, "run the file server in this process (its CPU then counts as the engine's)")
	f.StringVar(&s3.Endpoint, "s3", "", "fetch from this S3-compatible store (http(s)://host:port) through the engine and minio-go instead")
	f.StringVar(&s3.Region, "s3-region", "", "the region requests to --s3 are signed for (default us-east-1)")
	f.StringVar(&s3.Bucket, "s3-bucket", "", "an existing bucket of --s3 that keeps the files across runs (default: a fresh bucket, deleted afterwards)")
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
