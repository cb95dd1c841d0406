package download_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
)

// s3Server is a MinIO server: its endpoint and root credentials.
type s3Server struct {
	endpoint       string // http://host:port
	access, secret string
}

// sharedS3 is the MinIO server of $REDRIVE_S3_URL (http://KEY:SECRET@host:port,
// what .ci/minio starts). Without it the test is skipped, or fails when
// CI is set.
func sharedS3(t *testing.T) s3Server {
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
		t.Fatalf("REDRIVE_S3_URL: want http://ACCESS:SECRET@host:port, got an unparsable value")
	}
	secret, _ := u.User.Password()
	return s3Server{endpoint: u.Scheme + "://" + u.Host, access: u.User.Username(), secret: secret}
}

// minioBin is the MinIO binary of $REDRIVE_MINIO_BIN, for tests that start
// (and kill) a server of their own.
func minioBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("REDRIVE_MINIO_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("REDRIVE_MINIO_BIN is not set (CI): .ci/minio builds MinIO and prints it")
		}
		t.Skip("REDRIVE_MINIO_BIN is not set: run `eval \"$(bash .ci/minio)\"` for a MinIO binary")
	}
	return bin
}

// ownMinIO is a MinIO process of a test's own, on a fixed loopback port
// and data directory, so that it can be killed and started again.
type ownMinIO struct {
	t    *testing.T
	bin  string
	dir  string
	addr string
	s3Server
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
}

// startMinIO starts a MinIO server of the test's own; it is killed at
// cleanup.
func startMinIO(t *testing.T) *ownMinIO {
	t.Helper()
	bin := minioBin(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := &ownMinIO{t: t, bin: bin, dir: t.TempDir(), addr: addr,
		s3Server: s3Server{endpoint: "http://" + addr, access: "redrive-test", secret: "secret-" + hex.EncodeToString(randBytes(8))}}
	m.start()
	t.Cleanup(m.kill)
	return m
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// start runs the server and waits until it answers.
func (m *ownMinIO) start() {
	m.t.Helper()
	cmd := exec.Command(m.bin, "server", "--quiet", "--address", m.addr, m.dir)
	cmd.SysProcAttr = minioProcAttr()
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.access, "MINIO_ROOT_PASSWORD="+m.secret, "MINIO_BROWSER=off")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	testwait.Until(m.t, "MinIO answering on "+m.addr, 2*time.Minute, func() bool {
		select {
		case <-exited:
			m.t.Fatalf("MinIO exited: %s", log.String())
		default:
		}
		resp, err := http.Get(m.endpoint + "/minio/health/live")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill SIGKILLs the server and waits for its end.
func (m *ownMinIO) kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	testwait.Until(m.t, "MinIO process gone", time.Minute, func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	})
}

// client is a minio-go client of the server, for the tests' own puts.
func (s s3Server) client(t *testing.T) *minio.Client {
	t.Helper()
	u, _ := url.Parse(s.endpoint)
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(s.access, s.secret, ""), Secure: false})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// source is a download source of the server with its keys.
func (s s3Server) source() download.S3Source {
	return download.S3Source{Endpoint: s.endpoint, Credentials: credentials.NewStaticV4(s.access, s.secret, "")}
}

// newBucket makes a bucket of a random name, removed with its objects
// at cleanup.
func newBucket(t *testing.T, c *minio.Client) string {
	t.Helper()
	b := "redrive-test-" + hex.EncodeToString(randBytes(6))
	if err := c.MakeBucket(context.Background(), b, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Best effort: a test that killed its server has nothing to clean.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.RemoveBucketWithOptions(ctx, b, minio.RemoveBucketOptions{ForceDelete: true})
	})
	return b
}

// blocks is a reader of n deterministic bytes: 1 MiB blocks of seeded
// random data, each stamped with its index (cheap to make, all different).
type blocks struct {
	base []byte
	n    int64
	off  int64
}

func newBlocks(n int64, seed uint64) *blocks {
	return &blocks{base: data(1<<20, seed), n: n}
}

func (b *blocks) Read(p []byte) (int, error) {
	if b.off >= b.n {
		return 0, io.EOF
	}
	blk, in := b.off/int64(len(b.base)), b.off%int64(len(b.base))
	src := bytes.Clone(b.base[in:])
	if in < 8 {
		var stamp [8]byte
		binary.LittleEndian.PutUint64(stamp[:], uint64(blk))
		copy(src, stamp[in:])
	}
	n := copy(p, src[:min(int64(len(src)), b.n-b.off)])
	b.off += int64(n)
	return n, nil
}

// put stores n bytes of blocks(seed) as bucket/key and returns their
// SHA-256.
func put(t *testing.T, c *minio.Client, bucket, key string, n int64, seed uint64) string {
	t.Helper()
	h := sha256.New()
	if _, err := c.PutObject(context.Background(), bucket, key, io.TeeReader(newBlocks(n, seed), h), n, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileSum is the SHA-256 and size of a file.
func fileSum(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// TestS3Fetched: an object of a real MinIO, fetched by its s3:// URL into a
// directory (named after the key's last segment) and to a named file, whole.
func TestS3Fetched(t *testing.T) {
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	sum := put(t, c, b, "data/2024/report.bin", 5<<20+123, 1)
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": s.source()}})
	if err := attempt(h, 1, map[string]any{"url": "s3://" + b + "/data/2024/report.bin", "source": "lake", "dest": "in/"}); err != nil {
		t.Fatal(err)
	}
	if got, n := fileSum(t, filepath.Join(dir, "in", "report.bin")); got != sum || n != 5<<20+123 {
		t.Fatalf("file sha256 %s (%d bytes), want %s", got, n, sum)
	}
	// A named dest and the job's sha256, right then wrong.
	if err := attempt(h, 2, map[string]any{"url": "s3://" + b + "/data/2024/report.bin", "source": "lake", "dest": "r.bin", "sha256": sum}); err != nil {
		t.Fatal(err)
	}
	wrong := strings.Repeat("0", 64)
	err := attempt(h, 3, map[string]any{"url": "s3://" + b + "/data/2024/report.bin", "source": "lake", "dest": "w.bin", "sha256": wrong})
	verdict(t, err, failure.Permanent, download.ReasonChecksumMismatch)
	if _, err := os.Stat(filepath.Join(dir, "w.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("w.bin after a checksum mismatch: %v", err)
	}
}

// TestS3OneGiB: a 1 GiB object fetched intact. It runs once in CI (in the
// whole package's run, not among the repeated tests) and not with -short.
func TestS3OneGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB through MinIO: not with -short")
	}
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	const size = 1 << 30
	sum := put(t, c, b, "big.bin", size, 2)
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": s.source()}})
	if err := attempt(h, 1, map[string]any{"url": "s3://" + b + "/big.bin", "source": "lake", "sha256": sum}); err != nil {
		t.Fatal(err)
	}
	if got, n := fileSum(t, filepath.Join(dir, "big.bin")); got != sum || n != size {
		t.Fatalf("file sha256 %s (%d bytes), want %s (%d)", got, n, sum, size)
	}
}

// proxy is a TCP proxy in front of a server that counts the bytes it
// passes to the client and can stop one connection's answer once it has
// passed a number of bytes: hold it until released, or cut it.
type proxy struct {
	l        net.Listener
	upstream string
	served   atomic.Int64
	conns    atomic.Int32

	mu      sync.Mutex
	after   int64         // armed: act on the first connection past this many bytes
	cut     bool          // cut rather than hold
	held    chan struct{} // closed once a connection is held (or cut)
	release chan struct{} // closed to let a held connection go on
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		if p.release != nil {
			select {
			case <-p.release:
			default:
				close(p.release)
			}
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// arm makes the first connection that passes after bytes to the client
// stop there: held until release is closed, or cut (closed).
func (p *proxy) arm(after int64, cut bool) (held, release chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after, p.cut = after, cut
	p.held, p.release = make(chan struct{}), make(chan struct{})
	return p.held, p.release
}

// take returns the armed threshold and disarms it, for one connection.
func (p *proxy) take() (after int64, cut bool, held, release chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	after, cut, held, release = p.after, p.cut, p.held, p.release
	p.after = 0
	return
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.l.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer cc.Close()
			uc, err := net.Dial("tcp", p.upstream)
			if err != nil {
				return
			}
			defer uc.Close()
			go func() {
				io.Copy(uc, cc)
				uc.Close()
			}()
			p.pipe(cc, uc)
		}()
	}
}

// pipe copies the server's answer to the client, counting, and stops it
// where the proxy is armed.
func (p *proxy) pipe(cc, uc net.Conn) {
	after, cut, held, release := p.take()
	var sent int64
	buf := make([]byte, 32<<10)
	for {
		n, err := uc.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if after > 0 && sent+int64(n) >= after {
				k := after - sent
				if _, werr := cc.Write(chunk[:k]); werr != nil {
					return
				}
				p.served.Add(k)
				sent += k
				chunk = chunk[k:]
				close(held)
				after = 0
				if cut {
					return
				}
				<-release
			}
			if _, werr := cc.Write(chunk); werr != nil {
				return
			}
			p.served.Add(int64(len(chunk)))
			sent += int64(len(chunk))
		}
		if err != nil {
			return
		}
	}
}

// TestS3KillRestartResumes: MinIO SIGKILLed in the middle of a transfer,
// then started again on its data: the attempt fails transient, the next
// one resumes with a range (If-Match on the ETag) and completes, and the
// server sent no byte twice (counted by a proxy in front of it).
func TestS3KillRestartResumes(t *testing.T) {
	m := startMinIO(t)
	c := m.client(t)
	b := newBucket(t, c)
	const size = 48 << 20
	sum := put(t, c, b, "k.bin", size, 3)
	p := newProxy(t, m.addr)
	src := m.source()
	src.Endpoint = "http://" + p.l.Addr().String()
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": src}})
	held, release := p.arm(20<<20, false)
	payload := map[string]any{"url": "s3://" + b + "/k.bin", "source": "lake", "dest": "k.bin", "sha256": sum}
	first := make(chan error, 1)
	go func() { first <- attempt(h, 7, payload) }()
	select {
	case <-held:
	case err := <-first:
		t.Fatalf("the first attempt ended before 20 MiB: %v", err)
	}
	m.kill()
	m.start()
	close(release)
	err := <-first
	verdict(t, err, failure.Transient, "")
	partial := filepath.Join(dir, ".k.bin.redrive-7.part")
	fi, serr := os.Stat(partial)
	if serr != nil || fi.Size() < 20<<20 || fi.Size() >= size {
		t.Fatalf("partial file after the kill: %v, %v (want between 20 MiB and the whole object)", fi, serr)
	}
	before := p.served.Load()
	if err := attempt(h, 7, payload); err != nil {
		t.Fatal(err)
	}
	if got, n := fileSum(t, filepath.Join(dir, "k.bin")); got != sum || n != size {
		t.Fatalf("file sha256 %s (%d bytes), want %s", got, n, sum)
	}
	// Every byte once, plus the answers' headers (well under 16 KiB).
	if served := p.served.Load(); served < size || served > size+16<<10 {
		t.Fatalf("the server sent %d bytes for a %d-byte object (%d before the resume): bytes fetched twice", served, size, before)
	}
	if second := p.served.Load() - before; second > size-fi.Size()+16<<10 {
		t.Fatalf("the resumed attempt fetched %d bytes, want at most the %d missing", second, size-fi.Size())
	}
}

// TestS3ObjectReplaced: the object is replaced between two attempts: the
// resumed GET's If-Match fails (412), the download starts over from byte
// zero and the file is the new object, whole, never a mix of both.
func TestS3ObjectReplaced(t *testing.T) {
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	const size = 24 << 20
	put(t, c, b, "r.bin", size, 4)
	p := newProxy(t, strings.TrimPrefix(s.endpoint, "http://"))
	src := s.source()
	src.Endpoint = "http://" + p.l.Addr().String()
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": src}})
	held, _ := p.arm(8<<20, true)
	payload := map[string]any{"url": "s3://" + b + "/r.bin", "source": "lake", "dest": "r.bin"}
	err := attempt(h, 9, payload)
	select {
	case <-held:
	default:
		t.Fatalf("the first attempt ended before the cut: %v", err)
	}
	verdict(t, err, failure.Transient, "")
	// Replaced by another object of another size.
	newSum := put(t, c, b, "r.bin", size+(3<<20), 5)
	if err := attempt(h, 9, payload); err != nil {
		t.Fatal(err)
	}
	if got, n := fileSum(t, filepath.Join(dir, "r.bin")); got != newSum || n != size+(3<<20) {
		t.Fatalf("file sha256 %s (%d bytes), want the new object's %s: a mix of two versions", got, n, newSum)
	}
}

// TestS3Failures: a missing object or bucket is permanent, wrong
// credentials need auth; through a real worker the missing object's job
// is dead after its first attempt.
func TestS3Failures(t *testing.T) {
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	put(t, c, b, "there.bin", 1000, 6)
	wrongSecret := s.source()
	wrongSecret.Credentials = credentials.NewStaticV4(s.access, s.secret+"x", "")
	wrongKey := s.source()
	wrongKey.Credentials = credentials.NewStaticV4("nobody-"+hex.EncodeToString(randBytes(4)), s.secret, "")
	srcs := map[string]download.S3Source{"lake": s.source(), "badsecret": wrongSecret, "badkey": wrongKey}
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: srcs})
	for _, tc := range []struct {
		url, source string
		class       failure.Class
		reason      string
	}{
		{"s3://" + b + "/missing.bin", "lake", failure.Permanent, "s3:NoSuchKey"},
		{"s3://" + b + "-gone/there.bin", "lake", failure.Permanent, "s3:NoSuchBucket"},
		{"s3://" + b + "/there.bin", "badsecret", failure.NeedsAuth, "s3:SignatureDoesNotMatch"},
		{"s3://" + b + "/there.bin", "badkey", failure.NeedsAuth, "s3:InvalidAccessKeyId"},
	} {
		err := attempt(h, 11, map[string]any{"url": tc.url, "source": tc.source, "dest": "f.bin"})
		verdict(t, err, tc.class, tc.reason)
		if strings.Contains(err.Error(), s.secret) {
			t.Fatalf("the error shows the secret: %v", err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("files left after final failures: %v", ents)
	}

	client, _ := startWorker(t, download.Options{Dir: t.TempDir(), Sources: srcs})
	j, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": "s3://" + b + "/missing.bin", "source": "lake"})
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, client, j.ID)
	if j.State != redrive.Dead || j.Attempt != 1 || len(j.History) != 1 || j.History[0].Reason != "s3:NoSuchKey" {
		t.Fatalf("job %s after %d attempts, history %+v: want dead at once, s3:NoSuchKey", j.State, j.Attempt, j.History)
	}
}

// TestS3Refused: a payload naming an unknown source, a malformed s3:// URL
// or a source without credentials is refused at enqueue, naming the
// field, and nothing is stored.
func TestS3Refused(t *testing.T) {
	noKeys := download.S3Source{Endpoint: "http://127.0.0.1:1", Credentials: credentials.NewStaticV4("", "", ""),
		CredentialsFrom: "$LAKE_ACCESS_KEY and $LAKE_SECRET_KEY"}
	srcs := map[string]download.S3Source{"lake": {Endpoint: "http://127.0.0.1:1", Credentials: credentials.NewStaticV4("k", "s", "")},
		"nokeys": noKeys, "public": {Endpoint: "http://127.0.0.1:1", Anonymous: true}}
	client, _ := startWorker(t, download.Options{Dir: t.TempDir(), Sources: srcs})
	for _, tc := range []struct {
		payload map[string]any
		field   string
		want    string
	}{
		{map[string]any{"url": "s3://bucket/key"}, "payload.source", "needs a source"},
		{map[string]any{"url": "s3://bucket/key", "source": "sea"}, "payload.source", `unknown source "sea"`},
		{map[string]any{"url": "s3://bucket/key", "source": "nokeys"}, "payload.source", "$LAKE_ACCESS_KEY"},
		{map[string]any{"url": "s3://Bucket/key", "source": "lake"}, "payload.url", "lower-case"},
		{map[string]any{"url": "s3://bucket", "source": "lake"}, "payload.url", "names no object"},
		{map[string]any{"url": "s3://bucket/a/../b", "source": "lake"}, "payload.url", `".."`},
		{map[string]any{"url": "https://example.com/x", "source": "lake"}, "payload.url", "reads s3://bucket/key"},
		{map[string]any{"url": "s3://bucket/key", "source": "lake", "headers": map[string]string{"X-A": "b"}}, "payload.headers", "signs"},
		{map[string]any{"url": "s3://bucket/key", "source": "lake", "access_key": "k"}, "payload", "unknown field"},
	} {
		_, err := client.Enqueue(context.Background(), download.Kind, tc.payload)
		fe, ok := errors.AsType[*redrive.FieldError](err)
		if !errors.Is(err, redrive.ErrInvalid) || !ok || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a %s error saying %q", tc.payload, err, tc.field, tc.want)
		}
	}
	if n, err := client.Count(context.Background(), redrive.Filter{}); err != nil || n != 0 {
		t.Fatalf("%d jobs stored (%v), want none", n, err)
	}
	// An anonymous source needs no keys.
	if _, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": "s3://bucket/key", "source": "public"}); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseS3URL: the parser never panics, and what it accepts is a valid
// bucket and key that make up the URL again.
func FuzzParseS3URL(f *testing.F) {
	for _, s := range []string{"s3://bucket/key", "S3://b.c-d/a/b/c.txt", "s3://bucket", "s3://bucket/", "s3:///key",
		"s3://1.2.3.4/k", "s3://a..b/k", "s3://bucket//k", "s3://bucket/a/./b", "s3://bucket/\x00", "http://x/y",
		"s3://bucket/ü/%20?x#y", "s3://ab/k", strings.Repeat("s3://b/", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		bucket, key, err := download.ParseS3URL(raw)
		if err != nil {
			if bucket != "" || key != "" {
				t.Fatalf("%q: error %v with bucket %q key %q", raw, err, bucket, key)
			}
			return
		}
		if !strings.EqualFold(raw[:5], "s3://") || raw[5:] != bucket+"/"+key {
			t.Fatalf("%q: bucket %q key %q do not make the URL", raw, bucket, key)
		}
		if len(bucket) < 3 || len(bucket) > 63 || strings.ContainsAny(bucket, "/ABCDEFGHIJKLMNOPQRSTUVWXYZ_") {
			t.Fatalf("%q: bucket %q accepted", raw, bucket)
		}
		if key == "" || len(key) > 1024 || strings.HasPrefix(key, "/") {
			t.Fatalf("%q: key %q accepted", raw, key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q: key %q with a dot segment accepted", raw, key)
			}
		}
		if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("%q: key with a control character accepted", raw)
		}
	})
}
