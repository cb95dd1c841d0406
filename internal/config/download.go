package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Download is what `serve --download-dir` sets up: the built-in
// download kind, which writes the files its jobs fetch under Dir.
type Download struct {
	// Dir is the absolute directory downloads are written under; empty:
	// the kind is off, and serve refuses download jobs at enqueue.
	Dir string
	// MaxBytes bounds one file (0: the kind's default); a payload's
	// max_bytes may only lower it.
	MaxBytes int64
}

// DownloadDirSetting names the setting that turns the download kind on,
// in the refusal of download jobs while it is off.
const DownloadDirSetting = "--download-dir (or $REDRIVE_DOWNLOAD_DIR)"

// downloadSettings are the settings of the built-in download kind.
var downloadSettings = []setting{
	{name: "download-dir", help: "directory the built-in download kind writes its files under (created if missing; empty: the kind is off and download jobs are refused at enqueue); http jobs' --http-allow-private and --http-allow-link-local apply to downloads too", apply: func(c *Serve, v string) error {
		if v != "" && strings.TrimSpace(v) == "" {
			return errors.New("a path of white space only")
		}
		if strings.ContainsRune(v, 0) {
			return errors.New("the path contains a NUL byte")
		}
		c.Download.Dir = v
		return nil
	}},
	{name: "download-max-bytes", def: "0", help: "largest file one download job may write, in bytes (0: the kind's default); a job's max_bytes may only lower it", apply: func(c *Serve, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a whole number of bytes, 0 or more", v)
		}
		c.Download.MaxBytes = n
		return nil
	}},
}

// resolveDownload checks the download directory once every source is
// merged: it must be a directory this process can write to, created
// (with its parents) when missing. src names where the setting came from
// ("--download-dir", "REDRIVE_DOWNLOAD_DIR", "redrive.json: download-dir").
func resolveDownload(c *Serve, src string) error {
	if c.Download.Dir == "" {
		return nil
	}
	if src == "" {
		src = "download-dir"
	}
	dir, err := checkDownloadDir(c.Download.Dir)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	c.Download.Dir = dir
	return nil
}

// checkDownloadDir makes dir absolute, creates it when missing and checks
// that it is a directory that files can be created in.
func checkDownloadDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o750); err != nil {
			return "", fmt.Errorf("%s does not exist and cannot be created: %w", abs, pathCause(err))
		}
	case err != nil:
		return "", fmt.Errorf("%s: %w", abs, pathCause(err))
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	// Writable: the kind writes a temporary file and renames it.
	f, err := os.CreateTemp(abs, ".redrive-check-*")
	if err != nil {
		return "", fmt.Errorf("%s is not writable: %w", abs, pathCause(err))
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return "", fmt.Errorf("%s: remove the check file %s: %w", abs, name, err)
	}
	return abs, nil
}

// pathCause is the cause of a file system error without the path, which
// the message already names.
func pathCause(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}
