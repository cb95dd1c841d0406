package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
)

// genBlock is the size of the block generated files repeat (shifted per
// file): large enough that no two files share content at one offset,
// small enough to stay in cache.
const genBlock = 1 << 20

// FileServer serves N generated files of Size bytes each at
// /files/file-<i>.bin (i from 0), with Range, ETag and Last-Modified,
// without storing them: a file's byte at offset o is a fixed random
// block's byte at (o + i*7919) mod the block's size. It counts the body
// bytes it sends, in all and per file. Rate, when above 0, paces each
// response to about that many bytes per second.
type FileServer struct {
	N    int
	Size int64
	Rate int64

	block []byte
	sent  atomic.Int64
	per   []atomic.Int64
	reqs  atomic.Int64
	rangs atomic.Int64
	busy  atomic.Int64 // responses being written
	ln    net.Listener
	srv   *http.Server
}

// fileModTime is the Last-Modified of every generated file.
var fileModTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// NewFileServer starts serving n files of size bytes on a loopback port.
func NewFileServer(n int, size int64, rate int64) (*FileServer, error) {
	if n < 1 || size < 0 {
		return nil, fmt.Errorf("bench: file server: want at least 1 file and a size of 0 or more, got %d, %d", n, size)
	}
	fs := &FileServer{N: n, Size: size, Rate: rate, block: genBlockBytes(), per: make([]atomic.Int64, n)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fs.ln = ln
	fs.srv = &http.Server{Handler: fs, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = fs.srv.Serve(ln) }()
	return fs, nil
}

func genBlockBytes() []byte {
	b := make([]byte, genBlock)
	r := rand.NewChaCha8([32]byte{'r', 'e', 'd', 'r', 'i', 'v', 'e'})
	_, _ = r.Read(b)
	return b
}

// URL is the address of file i.
func (fs *FileServer) URL(i int) string {
	return "http://" + fs.ln.Addr().String() + "/files/" + FileName(i)
}

// FileName is the name of file i, the last segment of its URL.
func FileName(i int) string { return fmt.Sprintf("file-%03d.bin", i) }

// Sent is the body bytes sent so far, in all.
func (fs *FileServer) Sent() int64 { return fs.sent.Load() }

// SentOf is the body bytes of file i sent so far.
func (fs *FileServer) SentOf(i int) int64 { return fs.per[i].Load() }

// Requests is the number of file requests answered.
func (fs *FileServer) Requests() int64 { return fs.reqs.Load() }

// RangeRequests is the number of file requests that asked for a Range.
func (fs *FileServer) RangeRequests() int64 { return fs.rangs.Load() }

// Serving returns how many responses are being written: after the client
// went away, 0 once every handler saw its connection close.
func (fs *FileServer) Serving() int64 { return fs.busy.Load() }

// Close stops the server.
func (fs *FileServer) Close() error { return fs.srv.Close() }

// ServeHTTP serves GET and HEAD of /files/file-<i>.bin.
func (fs *FileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/files/file-")
	name, ok2 := strings.CutSuffix(name, ".bin")
	i, err := strconv.Atoi(name)
	if !ok || !ok2 || err != nil || i < 0 || i >= fs.N {
		http.NotFound(w, r)
		return
	}
	fs.reqs.Add(1)
	fs.busy.Add(1)
	defer fs.busy.Add(-1)
	if r.Header.Get("Range") != "" {
		fs.rangs.Add(1)
	}
	w.Header().Set("ETag", fmt.Sprintf(`"gen-%d-%d"`, i, fs.Size))
	w.Header().Set("Content-Type", "application/octet-stream")
	cw := &countingWriter{ResponseWriter: w, fs: fs, i: i, start: time.Now()}
	http.ServeContent(cw, r, FileName(i), fileModTime, fs.reader(i))
}

// reader returns a ReadSeeker over file i.
func (fs *FileServer) reader(i int) *genReader {
	return &genReader{block: fs.block, shift: int64(i) * 7919, size: fs.Size}
}

// SHA256 is the hex SHA-256 of file i, computed from the generator.
func (fs *FileServer) SHA256(i int) string {
	h := sha256.New()
	_, _ = io.Copy(h, fs.reader(i))
	return hex.EncodeToString(h.Sum(nil))
}

// countingWriter counts (and, with a rate, paces) the body bytes written.
type countingWriter struct {
	http.ResponseWriter
	fs    *FileServer
	i     int
	n     int64
	start time.Time
}

func (c *countingWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p
		if c.fs.Rate > 0 && len(chunk) > 32<<10 {
			chunk = chunk[:32<<10]
		}
		n, err := c.ResponseWriter.Write(chunk)
		written += n
		c.n += int64(n)
		c.fs.sent.Add(int64(n))
		c.fs.per[c.i].Add(int64(n))
		if err != nil {
			return written, err
		}
		p = p[n:]
		if c.fs.Rate > 0 {
			due := c.start.Add(time.Duration(float64(c.n) / float64(c.fs.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
	}
	return written, nil
}

// genReader reads a generated file.
type genReader struct {
	block       []byte
	shift, size int64
	off         int64
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	if rest := g.size - g.off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n := 0
	for n < len(p) {
		pos := (g.off + g.shift) % genBlock
		c := copy(p[n:], g.block[pos:])
		n += c
		g.off += int64(c)
	}
	return n, nil
}

func (g *genReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += g.off
	case io.SeekEnd:
		offset += g.size
	default:
		return 0, errors.New("genReader: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("genReader: negative position")
	}
	g.off = offset
	return offset, nil
}

// ServeFiles runs a FileServer for a benchmark's child process: it
// writes "listening <addr>" on out, then answers each line read from in
// with "sent <bytes sent so far>", until in is closed (its parent ended
// or closed the pipe) or ctx ends.
func ServeFiles(ctx context.Context, n int, size, rate int64, in io.Reader, out io.Writer) error {
	fs, err := NewFileServer(n, size, rate)
	if err != nil {
		return err
	}
	defer fs.Close()
	if _, err := fmt.Fprintf(out, "listening %s\n", fs.ln.Addr()); err != nil {
		return err
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- struct{}{}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-lines:
			if !ok {
				return nil
			}
			if _, err := fmt.Fprintf(out, "sent %d\n", fs.Sent()); err != nil {
				return err
			}
		}
	}
}

// readListening reads the "listening <addr>" line of a file server
// child.
func readListening(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("bench: file server: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		return "", fmt.Errorf("bench: file server said %q", line)
	}
	return addr, nil
}

// The curl sides of the download workload (DownloadParams.CurlMode).
const (
	// CurlBoth runs curl twice: durable (the goal's figure), then plain.
	CurlBoth = "both"
	// CurlDurable runs `curl -s -f -o FILE.part URL`, then, from the
	// benchmark process once each curl has exited, fsyncs the file,
	// renames it to FILE and fsyncs the directory: the engine's promise
	// (a file under its final name is whole and on disk).
	CurlDurable = "durable"
	// CurlPlain runs `curl -s -f -o FILE URL` and nothing else: the
	// kernel writes the file back whenever it likes.
	CurlPlain = "plain"
)

// DownloadParams are the parameters of the download workload.
type DownloadParams struct {
	// Files and Size are the files served and their size in bytes.
	Files int   `json:"files"`
	Size  int64 `json:"size"`
	// Concurrency is how many files are fetched at once, by the engine
	// (the queue's concurrency) and by the other side (curl processes, or
	// minio-go's FGetObject calls, at once).
	Concurrency int `json:"concurrency"`
	// Curl is the curl binary (default /usr/bin/curl); "-" skips curl.
	Curl string `json:"curl"`
	// CurlMode is which curl sides run: CurlBoth (the default),
	// CurlDurable or CurlPlain.
	CurlMode string `json:"curl_mode,omitempty"`
	// Dir is where the files are written (default: a temporary
	// directory), a fresh folder for each side, deleted afterwards.
	Dir string `json:"dir,omitempty"`
	// ServerCmd, when set, starts the file server as a child process (a
	// process calling ServeFiles with the args it is given), so that its
	// CPU is not counted as the engine's. Without it the server runs in
	// this process and the engine's CPU includes it.
	ServerCmd func(ctx context.Context, args []string) (*exec.Cmd, error) `json:"-"`
	// Verify checks every file's SHA-256 after each side (untimed).
	Verify bool `json:"verify"`
	// EngineLast runs the other side (curl, minio-go) first and the
	// engine last, to see what the order costs.
	EngineLast bool `json:"engine_last,omitempty"`
	// CheckpointBytes is the engine's download.Options.CheckpointBytes
	// (0: the kind's default).
	CheckpointBytes int64 `json:"checkpoint_bytes,omitempty"`
	// S3, when set, fetches the files from an S3-compatible store
	// (through the engine with an s3:// source, then with minio-go's
	// FGetObject) instead of from the HTTP file server with curl.
	S3 *DownloadS3 `json:"s3,omitempty"`
}

// DownloadSide is what one side (engine, curl or minio-go) measured.
type DownloadSide struct {
	Wall Duration `json:"wall_ms"`
	// MiBps is the bytes of all files over the wall time.
	MiBps float64 `json:"mib_per_s"`
	// CPU is user+system CPU time: of this process for the engine and
	// minio-go; for curl, of the curl processes plus SyncCPU.
	CPU     Duration `json:"cpu_ms"`
	UserCPU Duration `json:"user_cpu_ms"`
	SysCPU  Duration `json:"sys_cpu_ms"`
	// SyncCPU is the part of CPU (and of UserCPU plus SysCPU) spent by
	// this process in the fsyncs and renames after each file (durable
	// curl, minio-go), measured on the thread that made them
	// (RUSAGE_THREAD on Linux).
	SyncCPU Duration `json:"sync_cpu_ms,omitempty"`
	// CPUPerGiB is CPU seconds per GiB fetched.
	CPUPerGiB float64 `json:"cpu_s_per_gib"`
	// Served is the body bytes the file server sent for this side (0
	// with S3: MinIO does not say).
	Served int64 `json:"served_bytes"`
}

func (s *DownloadSide) figure(served bool) string {
	f := fmt.Sprintf("%s, %.0f MiB/s, CPU %s (user %s, sys %s", s.Wall, s.MiBps, s.CPU, s.UserCPU, s.SysCPU)
	if s.SyncCPU > 0 {
		f += fmt.Sprintf(", of which fsyncs %s", s.SyncCPU)
	}
	f += fmt.Sprintf(") = %.2f CPU-s/GiB", s.CPUPerGiB)
	if served {
		f += fmt.Sprintf(", served %.1f MiB", float64(s.Served)/(1<<20))
	}
	return f
}

func (s *DownloadSide) fill(wall, user, sys time.Duration, total int64) {
	s.Wall, s.UserCPU, s.SysCPU, s.CPU = Duration(wall), Duration(user), Duration(sys), Duration(user+sys)
	s.MiBps = float64(total) / (1 << 20) / wall.Seconds()
	s.CPUPerGiB = (user + sys).Seconds() / (float64(total) / (1 << 30))
}

// DownloadResult is what the download workload measured.
type DownloadResult struct {
	Meta
	Params DownloadParams `json:"params"`
	// ServerInProcess: the file server ran in this process, and its CPU
	// is in the engine's figure.
	ServerInProcess bool         `json:"server_in_process"`
	Engine          DownloadSide `json:"engine"`
	// CurlDurable is curl with the engine's durability (CurlDurable):
	// the side the goal compares the engine with.
	CurlDurable *DownloadSide `json:"curl_durable,omitempty"`
	// Curl is plain curl (CurlPlain).
	Curl *DownloadSide `json:"curl,omitempty"`
	// MinIOGo is minio-go's FGetObject followed by an fsync of the file
	// and of its directory (with S3).
	MinIOGo *DownloadSide `json:"minio_go,omitempty"`
}

// Info implements Result.
func (r *DownloadResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *DownloadResult) Parameters() []Figure {
	f := []Figure{
		{"files", fmt.Sprintf("%d x %.0f MiB = %.2f GiB", r.Params.Files, float64(r.Params.Size)/(1<<20),
			float64(r.Params.Size)*float64(r.Params.Files)/(1<<30))},
		{"concurrency", strconv.Itoa(r.Params.Concurrency)},
		{"engine checkpoints", checkpointFigure(r.Params.CheckpointBytes)},
		{"order", map[bool]string{false: "engine first", true: "engine last"}[r.Params.EngineLast]},
	}
	if s3 := r.Params.S3; s3 != nil {
		bucket := s3.Bucket + " (kept)"
		if s3.fresh {
			bucket = s3.Bucket + " (fresh, deleted afterwards)"
		}
		f = append(f, Figure{"s3 endpoint", s3.Endpoint}, Figure{"s3 bucket", bucket},
			Figure{"other side", "minio-go " + minioGoVersion() + " FGetObject, then fsync of the file and its directory"})
	} else {
		server := "child process"
		if r.ServerInProcess {
			server = "in this process (its CPU counts as the engine's)"
		}
		curl := r.Params.Curl
		if curl == "-" {
			curl = "skipped"
		} else {
			curl += " (" + r.Params.CurlMode + ")"
		}
		f = append(f, Figure{"file server", server}, Figure{"curl", curl})
	}
	return append(f, Figure{"verify sha256", strconv.FormatBool(r.Params.Verify)})
}

// checkpointFigure words the engine's checkpoint interval.
func checkpointFigure(n int64) string {
	if n == 0 {
		n = download.DefaultCheckpointBytes
	}
	return fmt.Sprintf("every %.0f MiB", float64(n)/(1<<20))
}

// Figures implements Result.
func (r *DownloadResult) Figures() []Figure {
	http := r.Params.S3 == nil
	name := "engine"
	if !http {
		name = "engine (s3://)"
	}
	f := []Figure{{name, r.Engine.figure(http)}}
	for _, o := range []struct {
		name string
		side *DownloadSide
	}{
		{"curl + fsync, rename, dir fsync", r.CurlDurable},
		{"curl", r.Curl},
		{"minio-go FGetObject + fsync, dir fsync", r.MinIOGo},
	} {
		if o.side != nil {
			f = append(f, Figure{o.name, o.side.figure(http)})
		}
	}
	for _, o := range []struct {
		name string
		side *DownloadSide
	}{
		{"engine / durable curl", r.CurlDurable},
		{"engine / curl", r.Curl},
		{"engine / minio-go", r.MinIOGo},
	} {
		if o.side != nil && o.side.MiBps > 0 && o.side.CPUPerGiB > 0 {
			f = append(f, Figure{o.name, fmt.Sprintf("throughput %.2fx, CPU per GiB %.2fx",
				r.Engine.MiBps/o.side.MiBps, r.Engine.CPUPerGiB/o.side.CPUPerGiB)})
		}
	}
	return f
}

// fileSource is the file server of a workload: in this process or a
// child.
type fileSource struct {
	base string // http://addr
	fs   *FileServer
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	// sent reads the bytes the server sent so far (-1: unknown).
	sent func() int64
}

func startFileSource(ctx context.Context, p DownloadParams) (*fileSource, error) {
	if p.ServerCmd == nil {
		fs, err := NewFileServer(p.Files, p.Size, 0)
		if err != nil {
			return nil, err
		}
		return &fileSource{base: "http://" + fs.ln.Addr().String(), fs: fs, sent: fs.Sent}, nil
	}
	cmd, err := p.ServerCmd(ctx, []string{"--files", strconv.Itoa(p.Files), "--size", strconv.FormatInt(p.Size, 10)})
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the file server: %w", err)
	}
	out := bufio.NewReader(outPipe)
	addr, err := readListening(out)
	if err != nil {
		in.Close()
		_ = cmd.Wait()
		return nil, err
	}
	src := &fileSource{base: "http://" + addr, cmd: cmd, in: in, out: out}
	src.sent = src.askSent
	return src, nil
}

// askSent asks a child file server for the bytes it sent so far (-1 if
// it does not answer).
func (s *fileSource) askSent() int64 {
	if _, err := io.WriteString(s.in, "sent?\n"); err != nil {
		return -1
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "sent "), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func (s *fileSource) url(i int) string { return s.base + "/files/" + FileName(i) }

// close stops the server and returns the bytes it sent in all (-1:
// unknown).
func (s *fileSource) close() (int64, error) {
	n := s.sent()
	if s.fs != nil {
		return n, s.fs.Close()
	}
	s.in.Close()
	return n, s.cmd.Wait()
}

// runCurl fetches every file with `curl -s -f -o FILE URL`, conc
// processes at once, and returns the wall time and the curl processes'
// CPU. Durable, curl writes FILE.part and this process, once curl has
// exited, fsyncs it, renames it to FILE and fsyncs the directory, within
// the wall time; syncCPU is what those calls cost this process.
func runCurl(ctx context.Context, curl string, src *fileSource, files int, dir string, conc int, durable bool) (wall, user, sys, syncUser, syncSys time.Duration, err error) {
	next := make(chan int)
	type usage struct {
		user, sys, syncUser, syncSys time.Duration
		err                          error
	}
	results := make(chan usage, conc)
	t0 := time.Now()
	for range conc {
		go func() {
			var u usage
			for i := range next {
				final := filepath.Join(dir, FileName(i))
				out := final
				if durable {
					out = final + ".part"
				}
				cmd := exec.CommandContext(ctx, curl, "-s", "-f", "-o", out, src.url(i))
				b, err := cmd.CombinedOutput()
				if err != nil && u.err == nil {
					u.err = fmt.Errorf("bench: %s %s: %v %s", curl, src.url(i), err, b)
				}
				if ps := cmd.ProcessState; ps != nil {
					u.user += ps.UserTime()
					u.sys += ps.SystemTime()
				}
				if durable && err == nil {
					su, ss, err := onThread(func() error { return commitFile(out, final) })
					u.syncUser += su
					u.syncSys += ss
					if err != nil && u.err == nil {
						u.err = err
					}
				}
			}
			results <- u
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	for range conc {
		u := <-results
		user += u.user
		sys += u.sys
		syncUser += u.syncUser
		syncSys += u.syncSys
		if u.err != nil && err == nil {
			err = u.err
		}
	}
	return time.Since(t0), user, sys, syncUser, syncSys, err
}

// commitFile makes the file at tmp whole and on disk under the name
// final: fsync, rename, fsync of the directory.
func commitFile(tmp, final string) error {
	if err := fsyncPath(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return fsyncPath(filepath.Dir(final))
}

// fsyncPath fsyncs the file or directory at path.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: fsync: %w", err)
	}
	return nil
}

// onThread runs f locked to its OS thread and returns the user and
// system CPU that thread used meanwhile: what f's system calls cost.
func onThread(f func() error) (user, sys time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	u0, s0 := threadCPU()
	err = f()
	u1, s1 := threadCPU()
	return u1 - u0, s1 - s0, err
}

// verifyFiles checks the size and SHA-256 of every file in dir against
// the generator.
func verifyFiles(dir string, files int, size int64, want []string) error {
	for i := range files {
		f, err := os.Open(filepath.Join(dir, FileName(i)))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCheck, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != size || got != want[i] {
			return fmt.Errorf("%w: %s: %d bytes, sha256 %s; want %d bytes, %s", ErrCheck, FileName(i), n, got, size, want[i])
		}
	}
	return nil
}

// processCPU is this process's user and system CPU time.
func processCPU() (user, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// DownloadDefaults of the download workload.
const (
	DefaultDownloadFiles       = 16
	DefaultDownloadSize        = 256 << 20
	DefaultDownloadConcurrency = 4
	DefaultCurl                = "/usr/bin/curl"
)

// Download times fetching p.Files generated files of p.Size bytes
// through the engine (a Worker with the download kind on the default
// queue, concurrency p.Concurrency, on a fresh SQLite store), then
// through another client, each side into a fresh directory after a
// sync(2) of the machine (so that no side waits on the writeback of the
// one before):
//
//   - from a local HTTP server: curl (p.Concurrency processes at once),
//     durable then plain (p.CurlMode);
//   - with p.S3, from an S3-compatible store (the files are put into a
//     bucket first, untimed): minio-go's FGetObject (p.Concurrency calls
//     at once, in this process), each file then fsynced with its
//     directory.
//
// It reports wall time, MiB/s and CPU seconds per GiB of each side: this
// process's CPU (getrusage) for the engine and minio-go, the curl
// processes' plus the fsyncs' for curl.
func Download(ctx context.Context, cfg Config, p DownloadParams) (*DownloadResult, error) {
	cfg.Workers = p.Concurrency
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if p.Curl == "" {
		p.Curl = DefaultCurl
	}
	if p.CurlMode == "" {
		p.CurlMode = CurlBoth
	}
	switch {
	case p.Files < 1:
		return nil, fmt.Errorf("bench: download: files must be at least 1, got %d", p.Files)
	case p.Size < 1:
		return nil, fmt.Errorf("bench: download: size must be at least 1 byte, got %d", p.Size)
	case p.Concurrency < 1:
		return nil, fmt.Errorf("bench: download: concurrency must be at least 1, got %d", p.Concurrency)
	case cfg.DatabaseURL != "":
		return nil, errors.New("bench: download: runs on SQLite only")
	case p.CheckpointBytes < 0:
		return nil, fmt.Errorf("bench: download: checkpoint bytes must not be negative, got %d", p.CheckpointBytes)
	case p.CurlMode != CurlBoth && p.CurlMode != CurlDurable && p.CurlMode != CurlPlain:
		return nil, fmt.Errorf("bench: download: curl mode %q: want %s, %s or %s", p.CurlMode, CurlBoth, CurlDurable, CurlPlain)
	}
	if p.S3 != nil {
		if err := p.S3.check(); err != nil {
			return nil, err
		}
	} else if p.Curl != "-" {
		if _, err := exec.LookPath(p.Curl); err != nil {
			return nil, fmt.Errorf("bench: download: curl: %w (give another one, or - to skip it)", err)
		}
	}
	r, err := newRig(ctx, cfg, "download")
	if err != nil {
		return nil, err
	}
	res := &DownloadResult{Params: p, ServerInProcess: p.ServerCmd == nil && p.S3 == nil}
	if p.S3 != nil {
		err = runDownloadS3(ctx, r, res)
	} else {
		err = runDownload(ctx, r, res)
	}
	return finish(r, res, &res.Meta, err)
}

// generatedSHA256 is the SHA-256 of every generated file, for Verify.
func generatedSHA256(p DownloadParams) []string {
	if !p.Verify {
		return nil
	}
	want := make([]string, p.Files)
	fs := &FileServer{N: p.Files, Size: p.Size, block: genBlockBytes()}
	for i := range want {
		want[i] = fs.SHA256(i)
	}
	return want
}

// runEngine enqueues one download job per request (each a file of size
// bytes) and runs the worker until all are completed; it fills side and
// checks the store (and, with want, the files in opts.Dir).
func runEngine(ctx context.Context, r *rig, opts download.Options, reqs []redrive.Request, size int64, side *DownloadSide, want []string, checks *checks) error {
	w := r.newWorker(nil)
	if err := download.Register(w, opts); err != nil {
		return err
	}
	if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
		return fmt.Errorf("bench: download: enqueue: %w", err)
	}
	syscall.Sync()
	u0, s0 := processCPU()
	t0 := time.Now()
	r.start()
	err := waitCompleted(ctx, r, int64(len(reqs)), r.cfg.StallTimeout)
	wall := time.Since(t0)
	u1, s1 := processCPU()
	if err == nil {
		err = r.stop()
	}
	if err != nil {
		return err
	}
	side.fill(wall, u1-u0, s1-s0, size*int64(len(reqs)))
	jobs, _, err := r.stats(ctx)
	if err != nil {
		return err
	}
	checks.expect("engine: completed jobs", jobs[redrive.Completed], int64(len(reqs)))
	if want != nil {
		if err := verifyFiles(opts.Dir, len(reqs), size, want); err != nil {
			*checks = append(*checks, err.Error())
		}
	}
	return nil
}

func runDownload(ctx context.Context, r *rig, res *DownloadResult) (err error) {
	p := res.Params
	total := p.Size * int64(p.Files)
	src, err := startFileSource(ctx, p)
	if err != nil {
		return err
	}
	defer func() {
		if _, cerr := src.close(); err == nil {
			err = cerr
		}
	}()
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
			reqs[i] = redrive.Request{Kind: download.Kind, Payload: download.Payload{URL: src.url(i)}}
		}
		sent0 := src.sent()
		opts := download.Options{Dir: dir, MaxBytes: p.Size + 1, CheckpointBytes: p.CheckpointBytes}
		if err := runEngine(ctx, r, opts, reqs, p.Size, &res.Engine, want, &checks); err != nil {
			return err
		}
		if sent0 >= 0 {
			res.Engine.Served = src.sent() - sent0
		}
		return os.RemoveAll(dir)
	}
	// curl: durable, then plain.
	curl := func() error {
		for _, durable := range []bool{true, false} {
			if durable && p.CurlMode == CurlPlain || !durable && p.CurlMode == CurlDurable {
				continue
			}
			name := "curl"
			side := &DownloadSide{}
			if durable {
				name, res.CurlDurable = "durable curl", side
			} else {
				res.Curl = side
			}
			dir := filepath.Join(base, strings.ReplaceAll(name, " ", "-"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			syscall.Sync()
			sent0 := src.sent()
			wall, user, sys, syncUser, syncSys, err := runCurl(ctx, p.Curl, src, p.Files, dir, p.Concurrency, durable)
			if err != nil {
				return err
			}
			side.fill(wall, user+syncUser, sys+syncSys, total)
			side.SyncCPU = Duration(syncUser + syncSys)
			if sent0 >= 0 {
				side.Served = src.sent() - sent0
			}
			if want != nil {
				if err := verifyFiles(dir, p.Files, p.Size, want); err != nil {
					checks = append(checks, name+": "+err.Error())
				}
			}
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
		return nil
	}
	sides := []func() error{engine}
	switch {
	case p.Curl == "-":
	case p.EngineLast:
		sides = []func() error{curl, engine}
	default:
		sides = append(sides, curl)
	}
	for _, side := range sides {
		if err := side(); err != nil {
			return err
		}
	}
	return checks.err("download")
}

// waitCompleted polls the store until n jobs of the default queue are
// completed; a dead job is an error.
func waitCompleted(ctx context.Context, r *rig, n int64, stall time.Duration) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastMove := int64(-1), time.Now()
	for {
		jobs, _, err := r.stats(ctx)
		if err != nil {
			return err
		}
		if d := jobs[redrive.Dead]; d > 0 {
			return fmt.Errorf("bench: download: %d jobs dead", d)
		}
		done := jobs[redrive.Completed]
		if done >= n {
			return nil
		}
		if done != last {
			last, lastMove = done, time.Now()
		} else if time.Since(lastMove) > stall {
			return fmt.Errorf("bench: download: stalled at %d of %d for %s", done, n, stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
