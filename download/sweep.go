package download

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
)

// workSuffixes are the endings of the kind's working files.
var workSuffixes = []string{".part", ".meta.tmp", ".meta"}

// parseWorkName splits the name of a working file (".redrive-<key>.part",
// ".<name>.redrive-<key>.meta", ...) into its job key and the name of its
// partial file; ok is false for any other name.
func parseWorkName(name string) (key, part string, ok bool) {
	if !strings.HasPrefix(name, ".") {
		return "", "", false
	}
	for _, suf := range workSuffixes {
		stem, found := strings.CutSuffix(name, suf)
		if !found {
			continue
		}
		i := strings.LastIndex(stem, ".redrive-")
		if i < 0 {
			return "", "", false
		}
		key = stem[i+len(".redrive-"):]
		if key == "" || strings.ContainsFunc(key, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'z') }) {
			return "", "", false
		}
		return key, stem + ".part", true
	}
	return "", "", false
}

// Sweep removes the working files (partial files and sidecars) that no
// attempt will resume: those of a job that Options.Lookup finds in a
// final state (completed, canceled, dead) or not at all (purged), and,
// for the others, those untouched for Options.OrphanAge (a job without
// id: a broker message's, whose state is not in the store; every job when
// Lookup is nil). A file whose partial file an attempt holds is kept.
// Register runs it in the background once at start; Handle again at most
// every Options.SweepInterval. It returns how many files it removed.
func (h *Handler) Sweep(ctx context.Context) (int, error) {
	cutoff := time.Now().Add(-h.opts.OrphanAge)
	removed := 0
	err := filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil || !d.Type().IsRegular() {
			return nil // an unreadable directory is skipped; links are not followed
		}
		key, part, ok := parseWorkName(d.Name())
		if !ok {
			return nil
		}
		if h.sweepOne(ctx, p, filepath.Join(filepath.Dir(p), part), key, cutoff) {
			removed++
		}
		return nil
	})
	return removed, err
}

// sweepOne removes the working file p (of the partial file part, of the
// job with key) when Sweep says so, holding part's lock meanwhile.
func (h *Handler) sweepOne(ctx context.Context, p, part, key string, cutoff time.Time) bool {
	if f, err := os.OpenFile(part, os.O_RDWR, 0); err == nil {
		defer f.Close()
		unlock, err := lockPart(f)
		if err != nil {
			return false // an attempt holds it
		}
		defer unlock()
	}
	if id, err := strconv.ParseInt(key, 10, 64); err == nil && h.opts.Lookup != nil {
		j, err := h.opts.Lookup(ctx, id)
		switch {
		case errors.Is(err, redrive.ErrNotFound):
		case err != nil:
			return false
		case j.State != redrive.Completed && j.State != redrive.Canceled && j.State != redrive.Dead:
			return false
		}
	} else if fi, err := os.Lstat(p); err != nil || !fi.ModTime().Before(cutoff) {
		return false
	}
	return os.Remove(p) == nil
}
