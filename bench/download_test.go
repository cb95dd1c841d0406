package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestDownloadWorkload runs the download workload small, in process,
// checking every file's SHA-256 on each side: the engine, durable curl
// (whose CPU holds its fsyncs) and plain curl.
func TestDownloadWorkload(t *testing.T) {
	curl := DefaultCurl
	if _, err := exec.LookPath(curl); err != nil {
		curl = "-"
	}
	const size = 5<<20 + 3
	res, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
		DownloadParams{Files: 3, Size: size, Concurrency: 2, Curl: curl, Dir: t.TempDir(), Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Engine.MiBps <= 0 || res.Engine.Served != 3*size || !res.ServerInProcess || res.Engine.SyncCPU != 0 {
		t.Errorf("engine: %+v", res.Engine)
	}
	if curl != "-" {
		for name, side := range map[string]*DownloadSide{"durable curl": res.CurlDurable, "curl": res.Curl} {
			if side == nil || side.Served != 3*size || side.CPU <= 0 || side.CPU != side.UserCPU+side.SysCPU {
				t.Errorf("%s: %+v", name, side)
			}
		}
		if d := res.CurlDurable; d != nil && (d.SyncCPU < 0 || d.SyncCPU > d.CPU) {
			t.Errorf("durable curl: fsyncs %s of CPU %s", d.SyncCPU, d.CPU)
		}
		if res.Curl != nil && res.Curl.SyncCPU != 0 {
			t.Errorf("plain curl has fsyncs: %+v", res.Curl)
		}
		figs := res.Figures()
		var names []string
		for _, f := range figs {
			names = append(names, f.Name)
		}
		if got := strings.Join(names, ","); !strings.Contains(got, "engine / durable curl") || !strings.Contains(got, "engine / curl") {
			t.Errorf("figures: %s", got)
		}
	}
	if len(res.Figures()) == 0 || len(res.Parameters()) == 0 {
		t.Error("no figures")
	}
}

// TestDownloadWorkloadCurlMode: one curl side when asked, before or
// after the engine, and a mode that is none of the three, or a negative
// checkpoint interval, is refused.
func TestDownloadWorkloadCurlMode(t *testing.T) {
	if _, err := exec.LookPath(DefaultCurl); err != nil {
		t.Skip("no curl")
	}
	for _, mode := range []string{CurlDurable, CurlPlain} {
		// Durable, the engine runs last and checkpoints every 256 KiB.
		durable := mode == CurlDurable
		res, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
			DownloadParams{Files: 2, Size: 1 << 20, Concurrency: 2, CurlMode: mode, Dir: t.TempDir(), Verify: true,
				EngineLast: durable, CheckpointBytes: map[bool]int64{true: 256 << 10}[durable]})
		if err != nil {
			t.Fatal(err)
		}
		if res.Engine.Served != 2<<20 {
			t.Errorf("%s: engine %+v", mode, res.Engine)
		}
		if (res.CurlDurable != nil) != (mode == CurlDurable) || (res.Curl != nil) != (mode == CurlPlain) {
			t.Errorf("%s: durable %+v, plain %+v", mode, res.CurlDurable, res.Curl)
		}
	}
	_, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
		DownloadParams{Files: 1, Size: 1, Concurrency: 1, CurlMode: "fast"})
	if err == nil || !strings.Contains(err.Error(), `curl mode "fast": want both, durable or plain`) {
		t.Errorf("curl mode fast: %v", err)
	}
	_, err = Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
		DownloadParams{Files: 1, Size: 1, Concurrency: 1, CheckpointBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "checkpoint bytes must not be negative") {
		t.Errorf("checkpoint bytes -1: %v", err)
	}
}

// testS3 is the MinIO server of $REDRIVE_S3_URL (what .ci/minio starts);
// without it the test is skipped, or fails when CI is set.
func testS3(t *testing.T) DownloadS3 {
	t.Helper()
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
	return DownloadS3{Endpoint: u.Scheme + "://" + u.Host, Credentials: credentials.NewStaticV4(u.User.Username(), secret, "")}
}

// TestDownloadWorkloadS3: against a real MinIO, the engine with an
// s3:// source and minio-go's FGetObject fetch every file intact; a fresh
// bucket is deleted afterwards; a kept bucket is filled once, and a file
// in it of another size is put again.
func TestDownloadWorkloadS3(t *testing.T) {
	s3 := testS3(t)
	const size = 3<<20 + 7
	run := func(s3 DownloadS3, files int) *DownloadResult {
		t.Helper()
		res, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
			DownloadParams{Files: files, Size: size, Concurrency: 2, Dir: t.TempDir(), Verify: true, S3: &s3})
		if err != nil {
			t.Fatal(err)
		}
		if res.Engine.MiBps <= 0 || res.Engine.CPU <= 0 || res.ServerInProcess || res.Curl != nil || res.CurlDurable != nil {
			t.Errorf("engine: %+v, in process %v", res.Engine, res.ServerInProcess)
		}
		if m := res.MinIOGo; m == nil || m.MiBps <= 0 || m.CPU <= 0 || m.SyncCPU > m.CPU {
			t.Errorf("minio-go: %+v", m)
		}
		return res
	}
	res := run(s3, 3)
	if !res.Params.S3.fresh || !strings.HasPrefix(res.Params.S3.Bucket, "redrive-bench-") {
		t.Errorf("bucket %+v", res.Params.S3)
	}
	mc, done, err := s3.client()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	ctx := context.Background()
	if ok, err := mc.BucketExists(ctx, res.Params.S3.Bucket); err != nil || ok {
		t.Errorf("the fresh bucket is still there: %v %v", ok, err)
	}

	var rb [6]byte
	rand.Read(rb[:])
	kept := "redrive-bench-kept-" + hex.EncodeToString(rb[:])
	if err := mc.MakeBucket(ctx, kept, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mc.RemoveBucketWithOptions(context.Background(), kept, minio.RemoveBucketOptions{ForceDelete: true})
	})
	// A file of another size where file 1 goes.
	if _, err := mc.PutObject(ctx, kept, FileName(1), strings.NewReader("short"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s3.Bucket = kept
	run(s3, 2)
	stats := func() [2]string {
		var v [2]string
		for i := range v {
			st, err := mc.StatObject(ctx, kept, FileName(i), minio.StatObjectOptions{})
			if err != nil || st.Size != size {
				t.Fatalf("%s: %d bytes, %v", FileName(i), st.Size, err)
			}
			v[i] = st.ETag + st.LastModified.String()
		}
		return v
	}
	before := stats()
	run(s3, 2)
	if after := stats(); after != before {
		t.Errorf("a kept file was put again: %v, then %v", before, after)
	}
}

// TestDownloadWorkloadS3Refused: an endpoint with credentials in it, no
// credentials, or a bad bucket name are refused before anything runs.
func TestDownloadWorkloadS3Refused(t *testing.T) {
	for _, tc := range []struct {
		s3   DownloadS3
		want string
	}{
		{DownloadS3{Endpoint: "http://k:s@127.0.0.1:1", Credentials: credentials.NewStaticV4("k", "s", "")}, "holds credentials"},
		{DownloadS3{Endpoint: "ftp://127.0.0.1:1", Credentials: credentials.NewStaticV4("k", "s", "")}, "want an http:// or https:// URL"},
		{DownloadS3{Endpoint: "http://127.0.0.1:1"}, "no credentials"},
		{DownloadS3{Endpoint: "http://127.0.0.1:1", Credentials: credentials.NewStaticV4("", "", "")}, "set AWS_ACCESS_KEY_ID"},
		{DownloadS3{Endpoint: "http://127.0.0.1:1", Credentials: credentials.NewStaticV4("k", "s", ""), Bucket: "Bad_Bucket"}, "bucket"},
	} {
		s3 := tc.s3
		_, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
			DownloadParams{Files: 1, Size: 1, Concurrency: 1, S3: &s3})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.s3, err, tc.want)
		}
	}
}

// TestDownloadFileServerRange: the generated files honour Range.
func TestDownloadFileServerRange(t *testing.T) {
	fs, err := NewFileServer(2, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	a, b := make([]byte, 100), make([]byte, 100)
	fs.reader(1).Read(a)
	r := fs.reader(1)
	r.Seek(40, io.SeekStart)
	n, _ := r.Read(b)
	if n != 60 || string(b[:60]) != string(a[40:]) {
		t.Errorf("seek then read: %d bytes", n)
	}
	if fs.SHA256(0) == fs.SHA256(1) {
		t.Error("two files are the same")
	}
}
