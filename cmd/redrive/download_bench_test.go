package main

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/bench"
)

// TestBenchDownload: `redrive bench download` small, with the file server
// a child process: the engine, durable curl and plain curl each fetch
// every byte once and intact (--verify), and the text output names both
// curl figures.
func TestBenchDownload(t *testing.T) {
	const files, size = 2, 1<<20 + 1
	r := benchJSON[bench.DownloadResult](t, "download", "--files", "2", "--size", "1048577", "--concurrency", "2", "--verify")
	checkMeta(t, r.Meta, "download")
	if r.ServerInProcess || r.Params.CurlMode != bench.CurlBoth {
		t.Errorf("params: %+v, server in process %v", r.Params, r.ServerInProcess)
	}
	for name, side := range map[string]*bench.DownloadSide{"engine": &r.Engine, "durable curl": r.CurlDurable, "curl": r.Curl} {
		if side == nil || side.Served != files*size || side.MiBps <= 0 || side.CPU <= 0 {
			t.Errorf("%s: %+v", name, side)
		}
	}
	if r.CurlDurable != nil && r.CurlDurable.SyncCPU > r.CurlDurable.CPU {
		t.Errorf("durable curl: fsyncs %s of CPU %s", r.CurlDurable.SyncCPU, r.CurlDurable.CPU)
	}

	stdout, stderr, err := runCLI(t, "bench", "download", "--files", "1", "--size", "4096", "--concurrency", "1",
		"--curl-mode", "durable", "--db-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, want := range []string{"curl + fsync, rename, dir fsync", "engine / durable curl", "(durable)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "engine / curl ") {
		t.Errorf("--curl-mode durable ran plain curl:\n%s", stdout)
	}
}

// TestBenchDownloadS3: `redrive bench download --s3` against a real
// MinIO, with the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY:
// the engine (s3://) and minio-go fetch every file intact, and the
// secret is in no output.
func TestBenchDownloadS3(t *testing.T) {
	raw := os.Getenv("REDRIVE_S3_URL")
	if raw == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("REDRIVE_S3_URL is not set (CI): .ci/minio starts MinIO and prints it")
		}
		t.Skip("REDRIVE_S3_URL is not set: run `eval \"$(bash .ci/minio)\"` for a MinIO server")
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		t.Fatal("REDRIVE_S3_URL: want http://ACCESS:SECRET@host:port")
	}
	secret, _ := u.User.Password()
	t.Setenv("AWS_ACCESS_KEY_ID", u.User.Username())
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	endpoint := u.Scheme + "://" + u.Host
	r := benchJSON[bench.DownloadResult](t, "download", "--files", "2", "--size", "1048579", "--concurrency", "2", "--verify", "--s3", endpoint)
	checkMeta(t, r.Meta, "download")
	if r.Params.S3 == nil || r.Params.S3.Endpoint != endpoint || !strings.HasPrefix(r.Params.S3.Bucket, "redrive-bench-") {
		t.Errorf("params: %+v", r.Params.S3)
	}
	if r.Engine.MiBps <= 0 || r.MinIOGo == nil || r.MinIOGo.MiBps <= 0 || r.Curl != nil || r.CurlDurable != nil {
		t.Errorf("engine %+v, minio-go %+v, curl %+v %+v", r.Engine, r.MinIOGo, r.Curl, r.CurlDurable)
	}
	stdout, stderr, err := runCLI(t, "bench", "download", "--files", "1", "--size", "4096", "--concurrency", "1",
		"--s3", endpoint, "--db-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if !strings.Contains(stdout, "engine / minio-go") || strings.Contains(stdout+stderr, secret) {
		t.Errorf("output:\n%s\n%s", stdout, stderr)
	}
}

// TestBenchDownloadBadFlags: the download workload's flags are checked,
// with an error naming the flag, before anything runs.
func TestBenchDownloadBadFlags(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--files", "0"}, "--files must be at least 1"},
		{[]string{"--checkpoint-bytes", "-1"}, "--checkpoint-bytes must not be negative, got -1"},
		{[]string{"--curl-mode", "fast"}, `--curl-mode must be both, durable or plain, got "fast"`},
		{[]string{"--s3-bucket", "b"}, "--s3-bucket needs --s3"},
		{[]string{"--s3-region", "eu-west-1"}, "--s3-region needs --s3"},
		{[]string{"--s3", "http://127.0.0.1:9000", "--curl", "/usr/bin/curl"}, "--curl is for the http sides"},
		{[]string{"--s3", "http://127.0.0.1:9000", "--curl-mode", "plain"}, "--curl-mode is for the http sides"},
		{[]string{"--s3", "http://127.0.0.1:9000", "--server-in-process"}, "--server-in-process is for the http sides"},
		{[]string{"--s3", "127.0.0.1:9000"}, "--s3: endpoint"},
		{[]string{"--s3", "http://key:secret@127.0.0.1:9000"}, "holds credentials"},
		{[]string{"--s3", "http://127.0.0.1:9000", "--s3-bucket", "Bad_Bucket"}, "--s3-bucket: "},
		{[]string{"--s3", "http://127.0.0.1:9000"}, "--s3 needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		_, stderr, err := runCLI(t, append([]string{"bench", "download"}, tc.args...)...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "redrive bench download --help") {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, tc.want)
		}
		if strings.Contains(stderr, "secret@") {
			t.Errorf("%v: stderr shows the credentials: %s", tc.args, stderr)
		}
	}
}
