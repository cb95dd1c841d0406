package bench

import (
	"context"
	"io"
	"os/exec"
	"testing"
)

// TestDownloadWorkload runs the download workload small, in process,
// checking every file's SHA-256 on both sides.
func TestDownloadWorkload(t *testing.T) {
	curl := DefaultCurl
	if _, err := exec.LookPath(curl); err != nil {
		curl = "-"
	}
	res, err := Download(context.Background(), Config{ErrorLog: io.Discard, DBDir: t.TempDir()},
		DownloadParams{Files: 3, Size: 5<<20 + 3, Concurrency: 2, Curl: curl, Dir: t.TempDir(), Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Engine.MiBps <= 0 || res.Engine.Served != 3*(5<<20+3) || !res.ServerInProcess {
		t.Errorf("engine: %+v", res.Engine)
	}
	if curl != "-" && (res.Curl == nil || res.Curl.Served != 3*(5<<20+3) || res.Curl.CPU <= 0) {
		t.Errorf("curl: %+v", res.Curl)
	}
	if len(res.Figures()) == 0 || len(res.Parameters()) == 0 {
		t.Error("no figures")
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
