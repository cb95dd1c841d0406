package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
)

// runDownloadCLI runs `redrive download` against the server with stdin
// and returns its outputs and exit error.
func runDownloadCLI(t *testing.T, p *redriveProc, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, append(append([]string{"download"}, args...), "--server", p.base)...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if strings.Contains(errOut.String(), "WARNING: DATA RACE") {
		t.Errorf("the race detector found a data race in redrive download:\n%s", errOut.String())
	}
	return out.String(), errOut.String(), err
}

// fileSHA256 is the hex SHA-256 of a file, "" if it cannot be read.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// countDownloadJobs counts the download jobs the server holds.
func countDownloadJobs(t *testing.T, p *redriveProc) int {
	t.Helper()
	code, b := p.api("GET", "/v1/jobs?kind=download&limit=1000", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/jobs: %d %s", code, b)
	}
	var res struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

// TestDownloadCLI: `redrive download` against a real serve and a real
// file server: files land byte-exact under --download-dir, a bad dest is
// refused whole, --wait fails listing a dead download, and a server
// without --download-dir refuses download jobs naming the setting.
func TestDownloadCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	bin := buildRedrive(t)
	files, err := bench.NewFileServer(4, 3<<20+17, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	dir := filepath.Join(t.TempDir(), "downloads")
	s := startRedrive(t, bin, nil, "--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0",
		"--download-dir", dir, "--retry-base", "20ms", "--retry-max", "50ms", "--retry-max-retries", "1", "--retry-jitter", "none")

	t.Run("batch", func(t *testing.T) {
		list := writeFile(t, "urls.txt", "# the batch\n\n"+files.URL(1)+"\n  "+files.URL(2)+"  \n# done\n")
		stdout, stderr, err := runDownloadCLI(t, s, files.URL(3)+"\n", files.URL(0), "--from-file", list, "--dest", "sub", "--wait")
		if err != nil {
			t.Fatalf("redrive download: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
		if !strings.Contains(stdout, "3 downloads completed") {
			t.Errorf("stdout:\n%s", stdout)
		}
		for _, i := range []int{0, 1, 2} {
			if !strings.Contains(stdout, files.URL(i)) {
				t.Errorf("stdout does not list %s:\n%s", files.URL(i), stdout)
			}
			if got := fileSHA256(filepath.Join(dir, "sub", bench.FileName(i))); got != files.SHA256(i) {
				t.Errorf("file %d: sha256 %q, want %s", i, got, files.SHA256(i))
			}
		}
		// Standard input is read only with --from-file -.
		stdout, stderr, err = runDownloadCLI(t, s, "# stdin\n"+files.URL(3)+"\n", "--from-file", "-", "--json", "--wait",
			"--sha256", files.SHA256(3))
		if err != nil {
			t.Fatalf("redrive download --from-file -: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
		var res struct {
			Jobs []*redrive.Job `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || len(res.Jobs) != 1 || res.Jobs[0].State != redrive.Completed {
			t.Fatalf("--json --wait: %v %s", err, stdout)
		}
		if got := fileSHA256(filepath.Join(dir, bench.FileName(3))); got != files.SHA256(3) {
			t.Errorf("file 3: sha256 %q, want %s", got, files.SHA256(3))
		}
	})

	t.Run("no-overwrite", func(t *testing.T) {
		// sub/<file 1> exists since "batch": --overwrite=false keeps it
		// and the job dies naming it.
		final := filepath.Join(dir, "sub", bench.FileName(1))
		if err := os.WriteFile(final, []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := runDownloadCLI(t, s, "", files.URL(1), "--dest", "sub", "--overwrite=false", "--wait")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
		if !strings.Contains(stdout, "exists") || !strings.Contains(stdout, "sub/"+bench.FileName(1)) {
			t.Errorf("the refusal does not name the file:\n%s", stdout)
		}
		if b, err := os.ReadFile(final); err != nil || string(b) != "mine" {
			t.Errorf("the existing file was replaced: %q %v", b, err)
		}
		// The default replaces it, as it always did.
		if stdout, stderr, err := runDownloadCLI(t, s, "", files.URL(1), "--dest", "sub", "--wait"); err != nil {
			t.Fatalf("redrive download: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
		if got := fileSHA256(final); got != files.SHA256(1) {
			t.Errorf("file 1 not replaced: sha256 %q", got)
		}
	})

	t.Run("bad-dest", func(t *testing.T) {
		before := countDownloadJobs(t, s)
		stdout, stderr, err := runDownloadCLI(t, s, "", files.URL(0), files.URL(1), "--dest", "../x")
		if err == nil {
			t.Fatalf("a dest outside the download dir was accepted:\n%s", stdout)
		}
		if !strings.Contains(stderr, "HTTP 400") || !strings.Contains(stderr, "dest") {
			t.Errorf("stderr: %s", stderr)
		}
		if after := countDownloadJobs(t, s); after != before {
			t.Errorf("%d download jobs before, %d after: a refused batch enqueued some", before, after)
		}
		// What the CLI can judge itself never reaches the server.
		for _, args := range [][]string{
			{"ftp://example.com/x"},
			{files.URL(0), files.URL(1), "--sha256", files.SHA256(0)},
			{files.URL(0), "--sha256", "abc"},
			{},
		} {
			if _, stderr, err := runDownloadCLI(t, s, "", args...); err == nil || !strings.Contains(stderr, "Run 'redrive download --help'") {
				t.Errorf("%v: err %v, stderr %s", args, err, stderr)
			}
		}
		if after := countDownloadJobs(t, s); after != before {
			t.Errorf("%d download jobs before, %d after", before, after)
		}
	})

	t.Run("wait-dead", func(t *testing.T) {
		missing := strings.Replace(files.URL(0), bench.FileName(0), bench.FileName(99), 1)
		stdout, stderr, err := runDownloadCLI(t, s, "", files.URL(1), missing, "--dest", "dead/", "--wait")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
		if !strings.Contains(stderr, "1 of 2 downloads failed") {
			t.Errorf("stderr: %s", stderr)
		}
		var failedLine string
		for line := range strings.Lines(stdout) {
			if strings.Contains(line, missing) && strings.Contains(line, "dead") {
				failedLine = line
			}
		}
		if failedLine == "" || !strings.Contains(failedLine, "404") || !strings.Contains(stdout, "ID") || !strings.Contains(stdout, "REASON") {
			t.Errorf("the dead download is not listed with its id, url, reason and error:\n%s", stdout)
		}
		if got := fileSHA256(filepath.Join(dir, "dead", bench.FileName(1))); got != files.SHA256(1) {
			t.Errorf("the good file of the batch: sha256 %q", got)
		}
		if _, err := os.Stat(filepath.Join(dir, "dead", bench.FileName(99))); err == nil {
			t.Errorf("a file exists for the 404")
		}
	})

	t.Run("off", func(t *testing.T) {
		off := startRedrive(t, bin, nil, "--db", sqlitetest.Path(t), "--addr", "127.0.0.1:0")
		_, stderr, err := runDownloadCLI(t, off, "", files.URL(0))
		if err == nil || !strings.Contains(stderr, "--download-dir") || !strings.Contains(stderr, "HTTP 400") {
			t.Errorf("a server without --download-dir: err %v, stderr %s", err, stderr)
		}
		code, b := off.api("POST", "/v1/jobs", `{"kind":"download","payload":{"url":"`+files.URL(0)+`"}}`)
		if code != http.StatusBadRequest || !strings.Contains(string(b), "download-dir") {
			t.Errorf("POST /v1/jobs: %d %s", code, b)
		}
		if n := countDownloadJobs(t, off); n != 0 {
			t.Errorf("%d download jobs stored", n)
		}
	})
}

// TestDownloadSIGKILL: 50 downloads of 20 MiB, paced so that serve is
// SIGKILLed with many of them mid-transfer; once serve restarts on the
// same database and directory, every job completes, every file is
// byte-exact, no final name ever holds a partial file, no temporary file
// is left, and the bytes fetched twice are bounded by what was in flight.
func TestDownloadSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary, and downloads 1 GiB")
	}
	const (
		n    = 50
		size = 20 << 20
		rate = 12 << 20 // bytes per second of each response
	)
	bin := buildRedrive(t)
	files, err := bench.NewFileServer(n, size, rate)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	want := make([]string, n)
	for i := range want {
		want[i] = files.SHA256(i)
	}
	base := t.TempDir()
	dir, db := filepath.Join(base, "downloads"), filepath.Join(base, "redrive.db")
	args := []string{"--db", db, "--addr", "127.0.0.1:0", "--download-dir", dir, "--queues", "default=10",
		"--retry-base", "50ms", "--retry-max", "200ms", "--retry-max-retries", "10", "--retry-jitter", "none"}
	s := startRedrive(t, bin, nil, args...)

	// Watch the directory throughout: a file under its final name must
	// be whole and right the first time it is seen, and stay so.
	checked := map[string]bool{}
	var partial []string
	watch := func() {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			if fi.Size() != size {
				partial = append(partial, fmt.Sprintf("%s: %d bytes", d.Name(), fi.Size()))
				return nil
			}
			if !checked[d.Name()] {
				checked[d.Name()] = true
				var i int
				if _, err := fmt.Sscanf(d.Name(), "file-%03d.bin", &i); err != nil || i >= n || fileSHA256(path) != want[i] {
					partial = append(partial, d.Name()+": wrong content")
				}
			}
			return nil
		})
	}

	urls := make([]string, n)
	for i := range urls {
		urls[i] = files.URL(i)
	}
	stdout, stderr, err := runDownloadCLI(t, s, strings.Join(urls, "\n"), "--from-file", "-")
	if err != nil {
		t.Fatalf("redrive download: %v\n%s\n%s", err, stdout, stderr)
	}
	// Kill once about a quarter of the bytes are sent, at a moment when
	// some file is being transferred with a quarter of it still to come
	// (0.4 s at the server's rate). The files go in waves of ten that
	// start and end together, and on a loaded machine every file started
	// may have been sent whole and be finishing: the check is made again
	// right before the kill, after the read of the jobs completed, and
	// the wait starts over when the wave ended meanwhile.
	midTransfer := func() bool {
		for i := range n {
			if sent := files.SentOf(i); sent > 0 && sent < size*3/4 {
				return true
			}
		}
		return false
	}
	var completed map[string]bool
	for {
		waitUntil(t, 2*e2eWait, "a quarter of the bytes sent, a file mid-transfer", func() error {
			if files.Sent() >= n*size/4 && midTransfer() {
				return nil
			}
			watch()
			return fmt.Errorf("%d bytes sent", files.Sent())
		})
		// The jobs completed before the kill: their files are never
		// fetched again. The others may all be, from their last
		// checkpoint.
		completed = completedURLs(t, s)
		if midTransfer() {
			break
		}
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	// The kernel resets the connections: the file server's handlers end.
	waitUntil(t, e2eWait, "the file server's handlers saw the connections go", func() error {
		if n := files.Serving(); n > 0 {
			return fmt.Errorf("%d responses still being written", n)
		}
		return nil
	})
	sentAtKill := make([]int64, n)
	var inFlight, bound int64
	bound = n * size
	running := 0
	for i := range sentAtKill {
		sentAtKill[i] = files.SentOf(i)
		if !completed[files.URL(i)] {
			bound += sentAtKill[i]
			if sentAtKill[i] > 0 && sentAtKill[i] < size {
				running++
				inFlight += sentAtKill[i]
			}
		}
	}
	t.Logf("killed with %d bytes sent: %d jobs completed, %d files mid-transfer (%d bytes of them)",
		files.Sent(), len(completed), running, inFlight)
	if running == 0 {
		t.Fatalf("the kill landed with no download mid-transfer")
	}
	watch()

	s2 := startRedrive(t, bin, nil, args...)
	waitUntil(t, 4*e2eWait, "every download completed after the restart", func() error {
		if c := len(completedURLs(t, s2)); c < n {
			watch()
			return fmt.Errorf("%d of %d", c, n)
		}
		return nil
	})
	watch()
	if len(partial) > 0 {
		t.Errorf("files under their final names were partial or wrong when seen: %v", partial)
	}
	for i := range n {
		if got := fileSHA256(filepath.Join(dir, bench.FileName(i))); got != want[i] {
			t.Errorf("%s: sha256 %q, want %s", bench.FileName(i), got, want[i])
		}
	}
	var left []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			left = append(left, d.Name())
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	served := files.Sent()
	t.Logf("served %d bytes for %d (%.1f MiB re-sent; bound %.1f MiB re-sent: the bytes sent before the kill for the jobs not completed then), %d requests, %d with Range",
		served, n*size, float64(served-n*size)/(1<<20), float64(bound-n*size)/(1<<20), files.Requests(), files.RangeRequests())
	if served > bound {
		t.Errorf("served %d bytes, more than the bound %d", served, bound)
	}
	// The machine did not restart: the rescued downloads resume from the
	// bytes already written, with Range.
	if files.RangeRequests() == 0 {
		t.Errorf("no download resumed with Range after the restart")
	}
}

// completedURLs returns the URLs of the completed download jobs.
func completedURLs(t *testing.T, p *redriveProc) map[string]bool {
	t.Helper()
	code, b := p.api("GET", "/v1/jobs?kind=download&state=completed&limit=1000", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/jobs: %d %s", code, b)
	}
	var res struct {
		Jobs []*store.Job `json:"jobs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, j := range res.Jobs {
		var pl struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(j.Payload, &pl)
		out[pl.URL] = true
	}
	return out
}
