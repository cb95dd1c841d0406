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

// TestServeDownloadSources: --download-sources from the config file (an
// object) or the environment (JSON text), each source's credentials read
// from serve's environment when a job names it; bad sources refused,
// naming the source and the field.
func TestServeDownloadSources(t *testing.T) {
	file := writeFile(t, "redrive.json", `{"download-dir": "`+filepath.ToSlash(t.TempDir())+`", "download-sources": {
		"lake": {"endpoint": "http://127.0.0.1:9000", "access_key_env": "T_LAKE_KEY", "secret_key_env": "T_LAKE_SECRET"},
		"aws": {"endpoint": "https://s3.eu-west-1.amazonaws.com", "region": "eu-west-1", "addressing": "virtual-host", "profile": "prod", "credentials_file": "/nonexistent/credentials"},
		"public": {"endpoint": "https://data.example.com", "anonymous": true}}}`)
	c, err := loadConfig(t, nil, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	srcs := c.Download.Sources
	if len(srcs) != 3 || srcs["lake"].Endpoint != "http://127.0.0.1:9000" || srcs["lake"].VirtualHost || !srcs["aws"].VirtualHost ||
		srcs["aws"].Region != "eu-west-1" || !srcs["public"].Anonymous || srcs["public"].Credentials != nil {
		t.Fatalf("sources %+v", srcs)
	}
	t.Setenv("T_LAKE_KEY", "AK")
	t.Setenv("T_LAKE_SECRET", "SK")
	if v, err := srcs["lake"].Credentials.GetWithContext(nil); err != nil || v.AccessKeyID != "AK" || v.SecretAccessKey != "SK" {
		t.Fatalf("lake's keys: %+v, %v", v, err)
	}
	if !strings.Contains(srcs["lake"].CredentialsFrom, "$T_LAKE_KEY") || !strings.Contains(srcs["aws"].CredentialsFrom, "prod") {
		t.Fatalf("where the credentials come from: %q, %q", srcs["lake"].CredentialsFrom, srcs["aws"].CredentialsFrom)
	}
	// The jobs' check: a source whose profile has no keys is refused at
	// enqueue, naming the field.
	checks, err := c.payloadChecks()
	if err != nil {
		t.Fatal(err)
	}
	err = checks["download"]([]byte(`{"url":"s3://bucket/key","source":"aws"}`))
	if err == nil || !strings.Contains(err.Error(), "payload.source") || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("a job of a source without keys: %v", err)
	}
	if err := checks["download"]([]byte(`{"url":"s3://bucket/key","source":"lake"}`)); err != nil {
		t.Fatalf("a job of lake: %v", err)
	}

	c, err = loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_CHECKPOINT_BYTES": "1048576"}, "--download-record-sha256")
	if err != nil || c.Download.CheckpointBytes != 1<<20 || !c.Download.RecordSHA256 {
		t.Fatalf("checkpoint and hashing: %+v, %v", c.Download, err)
	}
	if o := c.DownloadOptions(); o.CheckpointBytes != 1<<20 || !o.RecordSHA256 {
		t.Fatalf("options: %+v", o)
	}
	c, err = loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_SOURCES": `{"m":{"endpoint":"http://127.0.0.1:9000"}}`})
	if err != nil || c.Download.Sources["m"].Credentials == nil {
		t.Fatalf("from the environment: %+v, %v", c.Download.Sources, err)
	}

	for _, tc := range []struct{ value, want string }{
		{`{"x":{}}`, `source "x": endpoint: required`},
		{`{"x":{"endpoint":"ftp://h"}}`, `source "x": endpoint:`},
		{`{"x":{"endpoint":"http://k:s@h:9000"}}`, "holds credentials"},
		{`{"x":{"endpoint":"http://h/path"}}`, "without a path"},
		{`{"x":{"endpoint":"http://h","addressing":"dns"}}`, `source "x": addressing:`},
		{`{"x":{"endpoint":"http://h","access_key_env":"AKIAXXXX/secret=1"}}`, "the name goes here, never the key"},
		{`{"x":{"endpoint":"http://h","access_key_env":"A"}}`, "go together"},
		{`{"x":{"endpoint":"http://h","access_key_env":"A","secret_key_env":"B","profile":"p"}}`, "not both"},
		{`{"x":{"endpoint":"http://h","anonymous":true,"profile":"p"}}`, `source "x": anonymous:`},
		{`{"x":{"endpoint":"http://h","secret_key":"s"}}`, "unknown field"},
		{`{"bad name":{"endpoint":"http://h"}}`, "source name"},
		{`[1]`, "want a JSON object"},
	} {
		_, err := loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_SOURCES": tc.value})
		if err == nil || !strings.Contains(err.Error(), "REDRIVE_DOWNLOAD_SOURCES") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.value, err, tc.want)
		}
	}
}
