package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeDownloadConfig: --download-dir from a flag, the environment
// and the config file, made absolute and created when missing; off by
// default.
func TestServeDownloadConfig(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Download.Dir != "" || c.Download.MaxBytes != 0 {
		t.Errorf("default: %+v, want off", c.Download)
	}
	if got := c.Kinds(); len(got) != 1 || got[0] != "http" {
		t.Errorf("kinds without --download-dir: %v", got)
	}

	base := t.TempDir()
	missing := filepath.Join(base, "a", "b")
	c, err = loadConfig(t, nil, "--download-dir", missing, "--download-max-bytes", "1048576")
	if err != nil {
		t.Fatal(err)
	}
	if c.Download.Dir != missing || c.Download.MaxBytes != 1<<20 {
		t.Errorf("from flags: %+v", c.Download)
	}
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() {
		t.Errorf("the missing directory was not created: %v", err)
	}
	if ents, _ := os.ReadDir(missing); len(ents) != 0 {
		t.Errorf("the writability check left %v behind", ents)
	}
	if got := c.Kinds(); len(got) != 2 || got[1] != "download" {
		t.Errorf("kinds with --download-dir: %v", got)
	}

	// A relative path is made absolute; the flag wins over the
	// environment, which wins over the file.
	t.Chdir(base)
	c, err = loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_DIR": "fromenv"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "fromenv"); c.Download.Dir != want {
		t.Errorf("from the environment: %q, want %q", c.Download.Dir, want)
	}
	file := writeFile(t, "redrive.json", `{"download-dir": "`+filepath.ToSlash(filepath.Join(base, "fromfile"))+`", "download-max-bytes": 10}`)
	c, err = loadConfig(t, nil, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if c.Download.Dir != filepath.Join(base, "fromfile") || c.Download.MaxBytes != 10 {
		t.Errorf("from the file: %+v", c.Download)
	}
	c, err = loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_DIR": "fromenv"}, "--config", file, "--download-dir", "fromflag")
	if err != nil {
		t.Fatal(err)
	}
	if c.Download.Dir != filepath.Join(base, "fromflag") {
		t.Errorf("flag over env over file: %q", c.Download.Dir)
	}
}

func TestServeDownloadConfigErrors(t *testing.T) {
	base := t.TempDir()
	notDir := writeFile(t, "plain", "x")
	readOnly := filepath.Join(base, "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	underFile := filepath.Join(notDir, "sub")
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--download-dir", notDir}, want: "--download-dir: " + notDir + " is not a directory"},
		{env: map[string]string{"REDRIVE_DOWNLOAD_DIR": underFile}, want: "REDRIVE_DOWNLOAD_DIR: " + underFile + ": not a directory"},
		{args: []string{"--download-dir", "  "}, want: "--download-dir: a path of white space only"},
		{args: []string{"--download-max-bytes", "-1"}, want: `--download-max-bytes: "-1": want a whole number of bytes`},
		{args: []string{"--download-max-bytes", "1MB"}, want: `--download-max-bytes: "1MB": want a whole number of bytes`},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.env, tc.args, err, tc.want)
		}
	}
	if os.Geteuid() != 0 {
		_, err := loadConfig(t, nil, "--download-dir", readOnly)
		if want := "--download-dir: " + readOnly + " is not writable"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("read-only directory: err = %v, want %q", err, want)
		}
	}
	file := writeFile(t, "redrive.json", `{"download-dir": "`+filepath.ToSlash(notDir)+`"}`)
	if _, err := loadConfig(t, nil, "--config", file); err == nil || !strings.Contains(err.Error(), file+": download-dir: ") {
		t.Errorf("from the file: err = %v, want it to name the file and key", err)
	}
}
