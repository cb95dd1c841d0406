package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
)

// DownloadS3 is the S3-compatible store (MinIO, S3...) of the download
// workload's s3:// sides.
type DownloadS3 struct {
	// Endpoint is the store's base URL, scheme and host (and port), e.g.
	// "http://127.0.0.1:9000", without credentials.
	Endpoint string `json:"endpoint"`
	// Region is the region the requests are signed for (default
	// "us-east-1").
	Region string `json:"region,omitempty"`
	// Bucket, when set, is an existing bucket that keeps the files across
	// runs: a file already there (put by this workload, of this size) is
	// not put again. Empty: a fresh bucket, deleted afterwards (Bucket
	// then names it in the result).
	Bucket string `json:"bucket"`
	// Credentials sign the requests of both sides; they are in no output.
	Credentials *credentials.Credentials `json:"-"`

	fresh bool // the bucket is the run's own
}

// downloadS3Source is the name of the engine's source in the workload.
const downloadS3Source = "bench"

// genTag is the user metadata ("redrive-bench") of a file the workload
// put: the generator's version, the file's index and size.
func genTag(i int, size int64) string {
	return "gen1-" + strconv.Itoa(i) + "-" + strconv.FormatInt(size, 10)
}

// check refuses an endpoint that is not a URL, credentials that give no
// keys, or a malformed bucket name.
func (s *DownloadS3) check() error {
	if _, err := download.ParseS3Endpoint(s.Endpoint); err != nil {
		return fmt.Errorf("bench: download: s3 %w", err)
	}
	if s.Credentials == nil {
		return errors.New("bench: download: s3: no credentials")
	}
	v, err := s.Credentials.GetWithContext(nil)
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		msg := "bench: download: s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE of ~/.aws/credentials)"
		if err != nil {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return errors.New(msg)
	}
	if s.Bucket != "" {
		if _, _, err := download.ParseS3URL("s3://" + s.Bucket + "/k"); err != nil {
			return fmt.Errorf("bench: download: s3 bucket: %w", err)
		}
	}
	return nil
}

// client is a new minio-go client of the store, with a connection pool
// of its own, which done closes.
func (s *DownloadS3) client() (mc *minio.Client, done func(), err error) {
	u, err := download.ParseS3Endpoint(s.Endpoint)
	if err != nil {
		return nil, nil, err
	}
	tr, err := minio.DefaultTransport(u.Scheme == "https")
	if err != nil {
		return nil, nil, err
	}
	mc, err = minio.New(u.Host, &minio.Options{Creds: s.Credentials, Secure: u.Scheme == "https", Region: s.Region, Transport: tr})
	if err != nil {
		return nil, nil, err
	}
	return mc, tr.CloseIdleConnections, nil
}

// minioGoVersion is the version of minio-go this binary holds.
func minioGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/minio/minio-go/v7" {
				return d.Version
			}
		}
	}
	return "v7"
}

// runDownloadS3 puts the generated files into the bucket (untimed), then
// fetches them through the engine with an s3:// source, then with
// minio-go's FGetObject.
func runDownloadS3(ctx context.Context, r *rig, res *DownloadResult) (err error) {
	p := res.Params
	s3 := p.S3
	total := p.Size * int64(p.Files)
	mc, done, err := s3.client()
	if err != nil {
		return fmt.Errorf("bench: download: s3: %w", err)
	}
	defer done()
	if s3.Bucket == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		s3.Bucket, s3.fresh = "redrive-bench-"+hex.EncodeToString(b[:]), true
		if err := mc.MakeBucket(ctx, s3.Bucket, minio.MakeBucketOptions{Region: s3.Region}); err != nil {
			return fmt.Errorf("bench: download: s3: make bucket %s: %w", s3.Bucket, err)
		}
		defer func() {
			if rerr := mc.RemoveBucketWithOptions(context.WithoutCancel(ctx), s3.Bucket, minio.RemoveBucketOptions{ForceDelete: true}); rerr != nil && err == nil {
				err = fmt.Errorf("bench: download: s3: remove bucket %s: %w", s3.Bucket, rerr)
			}
		}()
	} else if ok, err := mc.BucketExists(ctx, s3.Bucket); err != nil {
		return fmt.Errorf("bench: download: s3: bucket %s: %w", s3.Bucket, err)
	} else if !ok {
		return fmt.Errorf("bench: download: s3: bucket %s does not exist: create it, or give no bucket for a fresh one", s3.Bucket)
	}
	if err := putGenerated(ctx, mc, s3.Bucket, p.Files, p.Size, p.Concurrency); err != nil {
		return err
	}
	want := generatedSHA256(p)
	base, err := os.MkdirTemp(p.Dir, "redrive-bench-download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)

	var checks checks
	engine := func() error {
		dir := filepath.Join(base, "engine")
		reqs := make([]redrive.Request, p.Files)
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: download.Kind, Payload: download.Payload{
				URL: "s3://" + s3.Bucket + "/" + FileName(i), Source: downloadS3Source}}
		}
		opts := download.Options{Dir: dir, MaxBytes: p.Size + 1, CheckpointBytes: p.CheckpointBytes, Sources: map[string]download.S3Source{
			downloadS3Source: {Endpoint: s3.Endpoint, Region: s3.Region, Credentials: s3.Credentials}}}
		if err := runEngine(ctx, r, opts, reqs, p.Size, &res.Engine, want, &checks); err != nil {
			return err
		}
		return os.RemoveAll(dir)
	}
	// minio-go, with a client (and connections) of its own.
	other := func() error {
		mc, done, err := s3.client()
		if err != nil {
			return fmt.Errorf("bench: download: s3: %w", err)
		}
		defer done()
		dir := filepath.Join(base, "minio-go")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		syscall.Sync()
		side := &DownloadSide{}
		if err := runFGetObject(ctx, mc, s3.Bucket, p.Files, dir, p.Concurrency, side, total); err != nil {
			return err
		}
		res.MinIOGo = side
		if want != nil {
			if err := verifyFiles(dir, p.Files, p.Size, want); err != nil {
				checks = append(checks, "minio-go: "+err.Error())
			}
		}
		return os.RemoveAll(dir)
	}
	sides := []func() error{engine, other}
	if p.EngineLast {
		sides = []func() error{other, engine}
	}
	for _, side := range sides {
		if err := side(); err != nil {
			return err
		}
	}
	return checks.err("download")
}

// putGenerated puts the generated files into the bucket, conc at once,
// but for those already there with this size and generator.
func putGenerated(ctx context.Context, mc *minio.Client, bucket string, files int, size int64, conc int) error {
	gen := &FileServer{N: files, Size: size, block: genBlockBytes()}
	next := make(chan int)
	errs := make(chan error, conc)
	for range conc {
		go func() {
			var first error
			for i := range next {
				if first != nil {
					continue
				}
				tag := genTag(i, size)
				st, err := mc.StatObject(ctx, bucket, FileName(i), minio.StatObjectOptions{})
				if err == nil && st.Size == size && metaValue(st.UserMetadata, "redrive-bench") == tag {
					continue
				}
				_, err = mc.PutObject(ctx, bucket, FileName(i), gen.reader(i), size, minio.PutObjectOptions{
					ContentType: "application/octet-stream", UserMetadata: map[string]string{"redrive-bench": tag}})
				if err != nil {
					first = fmt.Errorf("bench: download: s3: put %s/%s: %w", bucket, FileName(i), err)
				}
			}
			errs <- first
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	var err error
	for range conc {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// metaValue is the user metadata value of key, whatever the case
// minio-go gives the key in.
func metaValue(m map[string]string, key string) string {
	for k, v := range m {
		if strings.EqualFold(k, key) || strings.EqualFold(k, "X-Amz-Meta-"+key) {
			return v
		}
	}
	return ""
}

// runFGetObject fetches every file with minio-go's FGetObject (a
// temporary file, renamed when whole), conc at once, then fsyncs it and
// its directory; it fills side with this process's CPU, and SyncCPU
// with what the fsyncs cost.
func runFGetObject(ctx context.Context, mc *minio.Client, bucket string, files int, dir string, conc int, side *DownloadSide, total int64) error {
	next := make(chan int)
	type usage struct {
		sync time.Duration
		err  error
	}
	results := make(chan usage, conc)
	u0, s0 := processCPU()
	t0 := time.Now()
	for range conc {
		go func() {
			var u usage
			for i := range next {
				if u.err != nil {
					continue
				}
				final := filepath.Join(dir, FileName(i))
				if err := mc.FGetObject(ctx, bucket, FileName(i), final, minio.GetObjectOptions{}); err != nil {
					u.err = fmt.Errorf("bench: download: minio-go: FGetObject %s/%s: %w", bucket, FileName(i), err)
					continue
				}
				su, ss, err := onThread(func() error {
					if err := fsyncPath(final); err != nil {
						return err
					}
					return fsyncPath(dir)
				})
				u.sync += su + ss
				u.err = err
			}
			results <- u
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	var err error
	var syncCPU time.Duration
	for range conc {
		u := <-results
		syncCPU += u.sync
		if u.err != nil && err == nil {
			err = u.err
		}
	}
	wall := time.Since(t0)
	u1, s1 := processCPU()
	if err != nil {
		return err
	}
	side.fill(wall, u1-u0, s1-s0, total)
	side.SyncCPU = Duration(syncCPU)
	return nil
}
