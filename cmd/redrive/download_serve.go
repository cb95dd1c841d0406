package main

import (
	"encoding/json"
	"errors"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/internal/config"
)

// errDownloadOff is the refusal of a download job by a server whose
// download kind is off.
var errDownloadOff = errors.New("the download kind is off on this server: start redrive serve with " + config.DownloadDirSetting +
	" naming the directory its files are written to")

// registerDownload registers the built-in download kind when
// --download-dir is set. Otherwise the kind's jobs are refused at
// enqueue (400, nothing stored) instead of waiting for a handler that
// this server does not have.
func registerDownload(w *redrive.Worker, cfg *config.Serve) error {
	if cfg.Download.Dir == "" {
		w.Client().SetValidator(downloadKind, func(json.RawMessage) error { return errDownloadOff })
		return nil
	}
	return download.Register(w, cfg.DownloadOptions())
}

// describeDownloadDir words the download kind's state for the start-up
// log.
func describeDownloadDir(cfg *config.Serve) string {
	if cfg.Download.Dir == "" {
		return "off (no --download-dir)"
	}
	return cfg.Download.Dir
}
