package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// TestDownloadS3CLI: serve with a --download-sources source whose keys
// are in its environment, and a real MinIO: `redrive download s3://...
// --source` fetches the object byte-exact; an unknown source is a 400
// naming payload.source, an s3:// URL without --source or a malformed
// one is refused by the CLI, and nothing is enqueued; the secret is in
// no output.
func TestDownloadS3CLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
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
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(u.User.Username(), secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	var rb [6]byte
	rand.Read(rb[:])
	bucket := "redrive-cli-" + hex.EncodeToString(rb[:])
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mc.RemoveBucketWithOptions(context.Background(), bucket, minio.RemoveBucketOptions{ForceDelete: true})
	})
	content := make([]byte, 3<<20+5)
	rand.Read(content)
	if _, err := mc.PutObject(ctx, bucket, "in/obj.bin", bytes.NewReader(content), int64(len(content)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)

	bin := buildRedrive(t)
	dir := filepath.Join(t.TempDir(), "downloads")
	sources := `{"lake":{"endpoint":"http://` + u.Host + `","access_key_env":"T_LAKE_KEY","secret_key_env":"T_LAKE_SECRET"}}`
	s := startRedrive(t, bin, []string{"T_LAKE_KEY=" + u.User.Username(), "T_LAKE_SECRET=" + secret},
		"--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0", "--download-dir", dir, "--download-sources", sources)

	stdout, stderr, err := runDownloadCLI(t, s, "", "s3://"+bucket+"/in/obj.bin", "--source", "lake", "--dest", "s3/", "--wait")
	if err != nil {
		t.Fatalf("redrive download: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if got := fileSHA256(filepath.Join(dir, "s3", "obj.bin")); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("the object's file: sha256 %q", got)
	}
	before := countDownloadJobs(t, s)
	_, stderr, err = runDownloadCLI(t, s, "", "s3://"+bucket+"/in/obj.bin", "--source", "sea")
	if err == nil || !strings.Contains(stderr, "HTTP 400") || !strings.Contains(stderr, "payload.source") || !strings.Contains(stderr, `unknown source "sea"`) {
		t.Errorf("an unknown source: err %v, stderr %s", err, stderr)
	}
	for _, args := range [][]string{
		{"s3://" + bucket + "/in/obj.bin"},
		{"s3://Bad_Bucket/k", "--source", "lake"},
		{"https://example.com/x", "--source", "lake"},
	} {
		if _, stderr, err := runDownloadCLI(t, s, "", args...); err == nil || !strings.Contains(stderr, "Run 'redrive download --help'") {
			t.Errorf("%v: err %v, stderr %s", args, err, stderr)
		}
	}
	if after := countDownloadJobs(t, s); after != before {
		t.Errorf("%d download jobs before, %d after refusals", before, after)
	}
	code, b := s.api("POST", "/v1/jobs", `{"kind":"download","payload":{"url":"s3://`+bucket+`/x","source":"lake","headers":{"Authorization":"x"}}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(b), "payload.headers") {
		t.Errorf("POST /v1/jobs with headers: %d %s", code, b)
	}
	if strings.Contains(s.out.String(), secret) {
		t.Errorf("serve's output shows the secret")
	}
}
