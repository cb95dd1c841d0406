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

// DownloadParams are the parameters of the download workload.
type DownloadParams struct {
	// Files and Size are the files served and their size in bytes.
	Files int   `json:"files"`
	Size  int64 `json:"size"`
	// Concurrency is how many files are fetched at once, by the engine
	// (the queue's concurrency) and by curl (processes at once).
	Concurrency int `json:"concurrency"`
	// Curl is the curl binary (default /usr/bin/curl); "-" skips curl.
	Curl string `json:"curl"`
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
}

// DownloadSide is what one side (engine or curl) measured.
type DownloadSide struct {
	Wall Duration `json:"wall_ms"`
	// MiBps is the bytes of all files over the wall time.
	MiBps float64 `json:"mib_per_s"`
	// CPU is user+system CPU time: of this process for the engine, of the
	// curl processes for curl.
	CPU     Duration `json:"cpu_ms"`
	UserCPU Duration `json:"user_cpu_ms"`
	SysCPU  Duration `json:"sys_cpu_ms"`
	// CPUPerGiB is CPU seconds per GiB fetched.
	CPUPerGiB float64 `json:"cpu_s_per_gib"`
	// Served is the body bytes the file server sent for this side.
	Served int64 `json:"served_bytes"`
}

func (s *DownloadSide) figure(total int64) string {
	return fmt.Sprintf("%s, %.0f MiB/s, CPU %s (user %s, sys %s) = %.2f CPU-s/GiB, served %.1f MiB",
		s.Wall, s.MiBps, s.CPU, s.UserCPU, s.SysCPU, s.CPUPerGiB, float64(s.Served)/(1<<20))
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
	ServerInProcess bool          `json:"server_in_process"`
	Engine          DownloadSide  `json:"engine"`
	Curl            *DownloadSide `json:"curl,omitempty"`
}

// Info implements Result.
func (r *DownloadResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *DownloadResult) Parameters() []Figure {
	server := "child process"
	if r.ServerInProcess {
		server = "in this process (its CPU counts as the engine's)"
	}
	curl := r.Params.Curl
	if curl == "-" {
		curl = "skipped"
	}
	return []Figure{
		{"files", fmt.Sprintf("%d x %.0f MiB = %.2f GiB", r.Params.Files, float64(r.Params.Size)/(1<<20),
			float64(r.Params.Size)*float64(r.Params.Files)/(1<<30))},
		{"concurrency", strconv.Itoa(r.Params.Concurrency)},
		{"file server", server},
		{"curl", curl},
		{"verify sha256", strconv.FormatBool(r.Params.Verify)},
	}
}

// Figures implements Result.
func (r *DownloadResult) Figures() []Figure {
	total := r.Params.Size * int64(r.Params.Files)
	f := []Figure{{"engine", r.Engine.figure(total)}}
	if r.Curl != nil {
		f = append(f, Figure{"curl", r.Curl.figure(total)})
		if r.Curl.MiBps > 0 && r.Curl.CPUPerGiB > 0 {
			f = append(f, Figure{"engine / curl", fmt.Sprintf("throughput %.2fx, CPU per GiB %.2fx",
				r.Engine.MiBps/r.Curl.MiBps, r.Engine.CPUPerGiB/r.Curl.CPUPerGiB)})
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

// runCurl fetches every file with `curl -s -o FILE URL`, conc processes
// at once, and returns the wall time and the curl processes' CPU.
func runCurl(ctx context.Context, curl string, src *fileSource, files int, dir string, conc int) (wall, user, sys time.Duration, err error) {
	next := make(chan int)
	type usage struct {
		user, sys time.Duration
		err       error
	}
	results := make(chan usage, conc)
	t0 := time.Now()
	for range conc {
		go func() {
			var u usage
			for i := range next {
				cmd := exec.CommandContext(ctx, curl, "-s", "-f", "-o", filepath.Join(dir, FileName(i)), src.url(i))
				if out, err := cmd.CombinedOutput(); err != nil && u.err == nil {
					u.err = fmt.Errorf("bench: %s %s: %v %s", curl, src.url(i), err, out)
				}
				if ps := cmd.ProcessState; ps != nil {
					u.user += ps.UserTime()
					u.sys += ps.SystemTime()
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
		if u.err != nil && err == nil {
			err = u.err
		}
	}
	return time.Since(t0), user, sys, err
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

// Download times fetching p.Files generated files of p.Size bytes from a
// local HTTP server through the engine (a Worker with the download kind
// on the default queue, concurrency p.Concurrency, on a fresh SQLite
// store) and then with curl (p.Concurrency `curl -s -o FILE URL`
// processes at once), each into a fresh directory. It reports wall time,
// MiB/s and CPU seconds per GiB of each side: this process's CPU
// (getrusage) for the engine, the curl processes' for curl.
func Download(ctx context.Context, cfg Config, p DownloadParams) (*DownloadResult, error) {
	cfg.Workers = p.Concurrency
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if p.Curl == "" {
		p.Curl = DefaultCurl
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
	}
	if p.Curl != "-" {
		if _, err := exec.LookPath(p.Curl); err != nil {
			return nil, fmt.Errorf("bench: download: curl: %w (give another one, or - to skip it)", err)
		}
	}
	r, err := newRig(ctx, cfg, "download")
	if err != nil {
		return nil, err
	}
	res := &DownloadResult{Params: p, ServerInProcess: p.ServerCmd == nil}
	return finish(r, res, &res.Meta, runDownload(ctx, r, res))
}

func runDownload(ctx context.Context, r *rig, res *DownloadResult) error {
	p := res.Params
	total := p.Size * int64(p.Files)
	src, err := startFileSource(ctx, p)
	if err != nil {
		return err
	}
	var want []string
	if p.Verify {
		want = make([]string, p.Files)
		fs := &FileServer{N: p.Files, Size: p.Size, block: genBlockBytes()}
		for i := range want {
			want[i] = fs.SHA256(i)
		}
	}
	base, err := os.MkdirTemp(p.Dir, "redrive-bench-download-")
	if err != nil {
		src.close()
		return err
	}
	defer os.RemoveAll(base)

	// The engine.
	engineDir := filepath.Join(base, "engine")
	w := r.newWorker(nil)
	if err := download.Register(w, download.Options{Dir: engineDir, MaxBytes: p.Size + 1}); err != nil {
		src.close()
		return err
	}
	reqs := make([]redrive.Request, p.Files)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: download.Kind, Payload: download.Payload{URL: src.url(i)}}
	}
	if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
		src.close()
		return fmt.Errorf("bench: download: enqueue: %w", err)
	}
	sent0 := src.sent()
	u0, s0 := processCPU()
	t0 := time.Now()
	r.start()
	err = waitCompleted(ctx, r, int64(p.Files), r.cfg.StallTimeout)
	wall := time.Since(t0)
	u1, s1 := processCPU()
	if err == nil {
		err = r.stop()
	}
	if err != nil {
		src.close()
		return err
	}
	res.Engine.fill(wall, u1-u0, s1-s0, total)
	if sent0 >= 0 {
		res.Engine.Served = src.sent() - sent0
	}
	var checks checks
	jobs, _, err := r.stats(ctx)
	if err != nil {
		src.close()
		return err
	}
	checks.expect("engine: completed jobs", jobs[redrive.Completed], int64(p.Files))
	if p.Verify {
		if err := verifyFiles(engineDir, p.Files, p.Size, want); err != nil {
			checks = append(checks, err.Error())
		}
	}
	if err := os.RemoveAll(engineDir); err != nil {
		src.close()
		return err
	}

	// curl.
	if p.Curl != "-" {
		curlDir := filepath.Join(base, "curl")
		if err := os.MkdirAll(curlDir, 0o755); err != nil {
			src.close()
			return err
		}
		sent0 := src.sent()
		wall, user, sys, err := runCurl(ctx, p.Curl, src, p.Files, curlDir, p.Concurrency)
		if err != nil {
			src.close()
			return err
		}
		res.Curl = &DownloadSide{}
		res.Curl.fill(wall, user, sys, total)
		if sent0 >= 0 {
			res.Curl.Served = src.sent() - sent0
		}
		if p.Verify {
			if err := verifyFiles(curlDir, p.Files, p.Size, want); err != nil {
				checks = append(checks, "curl: "+err.Error())
			}
		}
	}
	if _, err := src.close(); err != nil {
		return err
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
