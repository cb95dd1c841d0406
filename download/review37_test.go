package download_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestS3ErrorEchoingCredentialsMasked: an S3 endpoint whose error
// answer echoes the request's credentials (AWS's SignatureDoesNotMatch
// carries the access key id and the canonical request, with the session
// token, and is cut at 8 KiB when the token is long; a proxy's error page
// may print the request's headers) never puts the access key, the secret
// or the session token in the attempt's error, which the job's history,
// the DLQ and the logs keep.
func TestS3ErrorEchoingCredentialsMasked(t *testing.T) {
	const access, secret = "AKIAREVIEW37ACCESS", "review37-SECRET-key"
	token := "review37-TOKEN-" + strings.Repeat("Zm9vYmFy", 400) // a long STS token
	for _, tc := range []struct {
		name   string
		reason string
		body   func(r *http.Request) string
	}{
		{"signature-mismatch-cut", "s3:SignatureDoesNotMatch", func(r *http.Request) string {
			canon := "GET\n" + r.URL.EscapedPath() + "\n\nhost:" + r.Host + "\nx-amz-security-token:" + r.Header.Get("X-Amz-Security-Token") + "\n"
			var hexb strings.Builder
			for i := 0; i < len(canon); i++ {
				fmt.Fprintf(&hexb, "%02x ", canon[i])
			}
			return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>` +
				`<Message>The request signature we calculated does not match the signature you provided.</Message>` +
				`<AWSAccessKeyId>` + access + `</AWSAccessKeyId><CanonicalRequest>` + canon + `</CanonicalRequest>` +
				`<CanonicalRequestBytes>` + hexb.String() + `</CanonicalRequestBytes><RequestId>1</RequestId></Error>`
		}},
		{"proxy-echo", "http_403", func(r *http.Request) string {
			return "Bad Request: " + r.Header.Get("X-Amz-Security-Token") + " " + r.Header.Get("Authorization")
		}},
		{"proxy-echo-secret", "http_403", func(r *http.Request) string {
			return "debug: access " + access + " secret " + secret
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, tc.body(r))
			}))
			t.Cleanup(srv.Close)
			src := download.S3Source{Endpoint: srv.URL, Credentials: credentials.NewStaticV4(access, secret, token)}
			h := newHandler(t, download.Options{Sources: map[string]download.S3Source{"lake": src}})
			err := attempt(h, 1, map[string]any{"url": "s3://bucket/key.bin", "source": "lake", "dest": "f.bin"})
			verdict(t, err, failure.NeedsAuth, tc.reason)
			msg := err.Error()
			for what, s := range map[string]string{"access key": access, "secret": secret, "session token": token[:40]} {
				if strings.Contains(msg, s) {
					t.Errorf("the error shows the %s: %s", what, msg)
				}
			}
		})
	}
}

// TestS3OddKeys: objects of a real MinIO whose keys hold characters that
// URLs and signatures treat specially are fetched whole, by their key as
// written in the s3:// URL.
func TestS3OddKeys(t *testing.T) {
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": s.source()}})
	for i, key := range []string{"a b.bin", "a+b=c.bin", "100%.bin", "q?x=1#frag", "ünï/cödé.bin", "a//b.bin", "dir/x;y,z:@&$!'()*.bin",
		"tilde~/x.bin", "semi%2Fslash.bin", "trailing ", "[brackets]{}^`|\\.bin"} {
		data := randBytes(1000 + i)
		if _, err := c.PutObject(context.Background(), b, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Logf("key %q: MinIO refuses it: %v", key, err)
			continue
		}
		sum := hexSum(data)
		dest := fmt.Sprintf("f%d.bin", i)
		if err := attempt(h, int64(100+i), map[string]any{"url": "s3://" + b + "/" + key, "source": "lake", "dest": dest}); err != nil {
			t.Errorf("key %q: %v", key, err)
			continue
		}
		if got, n := fileSum(t, filepath.Join(dir, dest)); got != sum || n != 1000+int64(i) {
			t.Errorf("key %q: %d bytes, sha256 %s, want %s", key, n, got, sum)
		}
	}
}

// TestS3ResumeWithoutETagStartsOver: an S3-compatible store that gives no
// ETag (a gateway that drops it) cannot be resumed safely: If-Match needs
// one, and Last-Modified (to the second) does not tell an object replaced
// within the same second by one of the same size. The attempt after a
// dropped connection starts over from byte 0 instead of sending an empty
// If-Match and appending the new object's bytes to the old ones.
func TestS3ResumeWithoutETagStartsOver(t *testing.T) {
	const size = 256 << 10
	v1, v2 := randBytes(size), randBytes(size)
	modified := time.Now().UTC().Format(http.TimeFormat)
	var (
		mu       sync.Mutex
		current  = v1
		drop     = true
		ifMatch  []string
		rangeReq []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		content, cut := current, drop
		drop = false
		if v, ok := r.Header["If-Match"]; ok {
			ifMatch = append(ifMatch, strings.Join(v, ","))
		}
		rangeReq = append(rangeReq, r.Header.Get("Range"))
		mu.Unlock()
		if cut {
			conn, bw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nLast-Modified: %s\r\n\r\n", len(content), modified)
			bw.Write(content[:size/2])
			bw.Flush()
			return
		}
		// A store that ignores an If-Match it cannot use (an empty one)
		// and honours Range.
		w.Header().Set("Last-Modified", modified)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	src := download.S3Source{Endpoint: srv.URL, Credentials: credentials.NewStaticV4("AKIAREVIEW37", "review37-secret", "")}
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": src}})
	payload := map[string]any{"url": "s3://bucket/obj.bin", "source": "lake", "dest": "obj.bin"}
	verdict(t, attempt(h, 7, payload), failure.Transient, "")
	mu.Lock()
	current = v2 // replaced within the same second, same size
	mu.Unlock()
	if err := attempt(h, 7, payload); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "obj.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, v2) {
		t.Fatalf("the file is a mix of two versions (first half the old object's: %v); If-Match sent %q, Range %q",
			bytes.Equal(got[:size/2], v1[:size/2]), ifMatch, rangeReq)
	}
	for _, v := range ifMatch {
		if strings.TrimSpace(v) == "" {
			t.Errorf("an empty If-Match was sent (%q)", ifMatch)
		}
	}
}

// TestLyingRangeBodyBounded: a 206 whose Content-Range ends the file
// where the sidecar says but whose body runs on (its Content-Length
// larger than the range) is not written past the file's size: the
// attempt stops at the first byte beyond it, transient, with nothing
// past the end on disk, and the next attempt starts over.
func TestLyingRangeBodyBounded(t *testing.T) {
	content := data(1<<20, 3)
	const cut, extra = 300_000, 32 << 20
	var n atomic.Int32
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			dropAfter(t, w, content, `"v1"`, cut)
		case 2:
			// The range asked for, then 32 MiB more than the file holds.
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", cut, len(content)-1, len(content)))
			w.Header().Set("Content-Length", strconv.Itoa(len(content)-cut+extra))
			w.WriteHeader(http.StatusPartialContent)
			c := counter{w, &sent}
			c.Write(content[cut:])
			junk := make([]byte, 1<<20)
			for range extra / len(junk) {
				if _, err := c.Write(junk); err != nil {
					return
				}
			}
		default:
			serve(w, r, content, `"v1"`, &sent)
		}
	}))
	t.Cleanup(srv.Close)
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/f.bin", "dest": "f.bin"}
	verdict(t, attempt(h, 7, p), failure.Transient, failure.ReasonConnectionReset)
	err := attempt(h, 7, p)
	if err == nil {
		t.Fatal("a 206 longer than its range completed the file")
	}
	verdict(t, err, failure.Transient, "")
	part := filepath.Join(h.Dir(), ".f.bin.redrive-7.part")
	if fi, err := os.Stat(part); err == nil && fi.Size() > int64(len(content)) {
		t.Fatalf("partial file of %d bytes, beyond the file's %d", fi.Size(), len(content))
	}
	if s := sent.Load(); s >= int64(len(content)-cut+extra) {
		t.Errorf("the whole %d bytes of the lying body were read", s)
	}
	if err := attempt(h, 7, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "f.bin"), content)
}

// TestS3StoreChecksumChecked: an object MinIO stores with a SHA-256
// checksum is checked against it: fetched as stored, the file is kept
// and its digest recorded; with one byte changed on the way (a proxy
// between the worker and the store), the attempt fails, transient
// (checksum_mismatch), and no file is kept under the final name.
func TestS3StoreChecksumChecked(t *testing.T) {
	s := sharedS3(t)
	u, _ := url.Parse(s.endpoint)
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(s.access, s.secret, ""), TrailingHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	b := newBucket(t, c)
	content := randBytes(3 << 20)
	if _, err := c.PutObject(context.Background(), b, "sum.bin", bytes.NewReader(content), int64(len(content)),
		minio.PutObjectOptions{Checksum: minio.ChecksumSHA256}); err != nil {
		t.Fatal(err)
	}
	var corrupt atomic.Bool
	var offered atomic.Value
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		offered.Store(resp.Header.Get("X-Amz-Checksum-Sha256"))
		if corrupt.Load() && resp.StatusCode == http.StatusOK {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			body[len(body)/2] ^= 0xff
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		return nil
	}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	src := s.source()
	src.Endpoint = proxy.URL
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": src}})
	payload := map[string]any{"url": "s3://" + b + "/sum.bin", "source": "lake", "dest": "sum.bin"}
	if err := attempt(h, 1, payload); err != nil {
		t.Fatal(err)
	}
	if v, _ := offered.Load().(string); v == "" {
		t.Fatalf("MinIO offered no checksum: the check is not exercised")
	}
	wantFile(t, filepath.Join(dir, "sum.bin"), content)
	os.Remove(filepath.Join(dir, "sum.bin"))
	corrupt.Store(true)
	verdict(t, attempt(h, 2, payload), failure.Transient, download.ReasonChecksumMismatch)
	if _, err := os.Stat(filepath.Join(dir, "sum.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sum.bin after a checksum mismatch: %v", err)
	}
}

// TestConcurrentJobsOneDest: jobs of different contents started at once
// to one dest. With "overwrite": false exactly one completes, its file
// whole under the name, and each other one fails, permanent ("exists");
// by default every one completes and the file is one of them, whole.
// Either way no working file is left.
func TestConcurrentJobsOneDest(t *testing.T) {
	const jobs = 8
	contents := make([][]byte, jobs)
	for i := range contents {
		contents[i] = data(512<<10+i*1000, uint64(200+i))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil || i < 0 || i >= jobs {
			http.NotFound(w, r)
			return
		}
		serve(w, r, contents[i], fmt.Sprintf(`"c%d"`, i), new(atomic.Int64))
	}))
	t.Cleanup(srv.Close)
	for _, overwrite := range []bool{false, true} {
		h := newHandler(t, download.Options{})
		errs := make([]error, jobs)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range jobs {
			wg.Go(func() {
				<-start
				errs[i] = attempt(h, int64(300+i), map[string]any{"url": fmt.Sprintf("%s/f.bin?i=%d", srv.URL, i), "dest": "d/f.bin", "overwrite": overwrite})
			})
		}
		close(start)
		wg.Wait()
		got, err := os.ReadFile(filepath.Join(h.Dir(), "d", "f.bin"))
		if err != nil {
			t.Fatal(err)
		}
		winner, ok := -1, 0
		for i, err := range errs {
			if err == nil {
				ok++
				if bytes.Equal(got, contents[i]) {
					winner = i
				}
				continue
			}
			if overwrite {
				t.Errorf("overwrite: job %d: %v", i, err)
			} else {
				verdict(t, err, failure.Permanent, download.ReasonExists)
			}
		}
		if winner < 0 || (!overwrite && ok != 1) || (overwrite && ok != jobs) {
			t.Fatalf("overwrite %v: %d jobs completed, the file is whole content of %d (-1: none)", overwrite, ok, winner)
		}
		wantOnly(t, filepath.Join(h.Dir(), "d"), "f.bin")
	}
}

// TestServedNameSanitizedOnce: a directory dest takes its file's name
// from the response (Content-Disposition); a name that sanitize changes
// when given its own result (white space other than ' ' before trailing
// dots and spaces) was refused at the end as "not a name sanitize
// gives": the job failed, permanent, with every byte fetched.
func TestServedNameSanitizedOnce(t *testing.T) {
	content := data(64<<10, 9)
	for _, served := range []string{"report .\u00a0 .", "a.\u00a0", "x\u2003. "} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": served}))
			serve(w, r, content, `"n1"`, new(atomic.Int64))
		}))
		h := newHandler(t, download.Options{})
		err := attempt(h, 1, map[string]any{"url": srv.URL + "/x.bin", "dest": "in/"})
		srv.Close()
		if err != nil {
			t.Errorf("served name %q: %v", served, err)
			continue
		}
		names := files(t, filepath.Join(h.Dir(), "in"))
		if len(names) != 1 || download.Sanitize(names[0]) != names[0] {
			t.Errorf("served name %q: files %q", served, names)
		}
	}
}

// TestURLKeysNotEchoed: keys pasted into a payload's URL (an AWS secret
// key holds '/', so the URL does not parse and the redactor finds no
// user information to mask) are not quoted back, neither by Validate
// (the 400 of an enqueue) nor by an attempt of a job that came without
// the check (a broker's message), whose error the job's history, the DLQ
// and the logs keep.
func TestURLKeysNotEchoed(t *testing.T) {
	src := download.S3Source{Endpoint: "http://127.0.0.1:1", Credentials: credentials.NewStaticV4("AKIAREVIEW37", "review37-secret", "")}
	h := newHandler(t, download.Options{Sources: map[string]download.S3Source{"lake": src}})
	const access, secret = "AKIDPASTED37", "wJalr/PASTED37+key"
	for _, p := range []map[string]any{
		{"url": "s3://" + access + ":" + secret + "@bucket/key", "source": "lake"},
		{"url": "s3://" + access + "@bucket/key", "source": "lake"},
		{"url": "https://" + access + ":" + secret + "@h.example/x", "source": "lake"},
		{"url": "https://" + access + ":" + secret + "@h.example/x"},
	} {
		raw, _ := json.Marshal(p)
		for what, err := range map[string]error{"Validate": h.Validate(raw), "attempt": attempt(h, 1, p)} {
			if err == nil {
				t.Errorf("%s of %v: accepted", what, p)
				continue
			}
			if strings.Contains(err.Error(), access) || strings.Contains(err.Error(), "PASTED37+key") {
				t.Errorf("%s of %v: the error shows the keys: %v", what, p["url"], err)
			}
		}
	}
}

// TestS3DirectoryNameIsTheKeys: an s3:// object fetched into a directory
// dest is named after its key's last segment, as documented, whatever
// Content-Disposition its uploader stored with it: two objects that
// claim one file name do not land on one file, the second replacing the
// first.
func TestS3DirectoryNameIsTheKeys(t *testing.T) {
	s := sharedS3(t)
	c := s.client(t)
	b := newBucket(t, c)
	contents := map[string][]byte{"x/a.csv": randBytes(5000), "y/b.csv": randBytes(6000)}
	for key, content := range contents {
		if _, err := c.PutObject(context.Background(), b, key, bytes.NewReader(content), int64(len(content)),
			minio.PutObjectOptions{ContentDisposition: `attachment; filename="report.csv"`}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	h := newHandler(t, download.Options{Dir: dir, Sources: map[string]download.S3Source{"lake": s.source()}})
	for i, key := range []string{"x/a.csv", "y/b.csv"} {
		if err := attempt(h, int64(40+i), map[string]any{"url": "s3://" + b + "/" + key, "source": "lake", "dest": "in/"}); err != nil {
			t.Fatal(err)
		}
	}
	wantFile(t, filepath.Join(dir, "in", "a.csv"), contents["x/a.csv"])
	wantFile(t, filepath.Join(dir, "in", "b.csv"), contents["y/b.csv"])
}
